"""The bytes a cut super-graph edge moves, per model, read off the model itself."""
from __future__ import annotations

from dgbench.models.attention import dysat
from dgbench.models.discrete import evolvegcn_o, tmgcn
from dgbench.models.recurrent import mpnn_lstm, tgcn
from dgbench.trainers.discrete.dgc.model_traffic import model_traffic


def test_profiles_of_the_dgc_models():
    # T-GCN: GCN on the precomputed Ã X⁰ (nothing moves), GCN on hidden (one exchange), GRU carry h
    traffic = model_traffic(tgcn(hidden=6), 2)
    assert traffic.profile.spatial_widths == (6,) and traffic.profile.temporal_widths == (6,)
    assert traffic.profile.temporal_reach == "previous" and traffic.ends_with_time_encoder
    assert (traffic.structure, traffic.structure_layers, traffic.time, traffic.time_layers) == ("gcn", 2, "gru", 1)
    lstm = model_traffic(mpnn_lstm(hidden=6), 2)
    assert (lstm.structure, lstm.structure_layers, lstm.time, lstm.time_layers) == ("gcn", 2, "lstm", 2)
    # MPNN-LSTM: the two-layer LSTM's carry is (h, c) of both layers
    assert model_traffic(mpnn_lstm(hidden=6), 2).profile.temporal_widths == (24,)
    # DySAT: the GAT moves source score + values (1 + 6 per neighbour); attention reads every earlier input
    profile = model_traffic(dysat(hidden=6), 2).profile
    assert profile.spatial_widths == (7,) and profile.temporal_widths == (6,) and profile.temporal_reach == "all"
    assert model_traffic(dysat(hidden=6), 2).time == "attention"
    assert model_traffic(dysat(hidden=6, heads=2), 2).profile.spatial_widths == (8,)
    evolve = model_traffic(evolvegcn_o(hidden=6), 2)
    assert evolve.profile.temporal_widths == () and not evolve.ends_with_time_encoder


def test_window_modules_weigh_their_window():
    assert model_traffic(tmgcn(hidden=6, window=3), 2).profile.temporal_widths == (12, 12)  # 2 inputs per layer
