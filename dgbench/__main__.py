from dgbench.cli import main

main()
