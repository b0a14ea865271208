"""ParameterStatsCallback: the logged numbers are ‖Δw‖/‖w‖ and max |w|, by hand."""

import lightning as L
import torch
from torch import nn

from experiments.stats import ParameterStatsCallback, plot_parameter_stats


def _by_hand(before: list[torch.Tensor], after: list[torch.Tensor]) -> tuple[float, float]:
    b = torch.cat([t.reshape(-1) for t in before])
    a = torch.cat([t.reshape(-1) for t in after])
    return ((a - b).norm() / a.norm()).item(), a.abs().max().item()


def test_plain_loop_one_sgd_step_by_hand():
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
    optimizer = torch.optim.SGD([
        {"name": "first", "params": model[0].parameters(), "lr": 0.1},
        {"name": "second", "params": model[2].parameters(), "lr": 0.5},
    ])
    before = [p.detach().clone() for p in model.parameters()]
    model(torch.randn(5, 3)).square().sum().backward()
    callback = ParameterStatsCallback(keep_history=True)
    callback.before_step(optimizer)
    optimizer.step()
    stats = callback.after_step()
    after = [p.detach() for p in model.parameters()]
    for group, idx in (("first", slice(0, 2)), ("second", slice(2, 4))):
        ratio, max_abs = _by_hand(before[idx], after[idx])
        assert abs(stats[f"params/{group}/update_ratio"] - ratio) < 1e-6
        assert abs(stats[f"params/{group}/max_abs"] - max_abs) < 1e-6
        assert ratio > 0
    assert callback.history == [{"step": 0.0, **stats}]


def test_zero_initialised_weights_give_a_finite_ratio():
    table = nn.Parameter(torch.zeros(6))
    optimizer = torch.optim.Adam([table], lr=1e-3)
    (table * torch.arange(6.0)).sum().backward()
    callback = ParameterStatsCallback()
    callback.before_step(optimizer)
    optimizer.step()
    stats = callback.after_step()
    assert stats["params/group0/update_ratio"] == 1.0
    assert abs(stats["params/group0/max_abs"] - 1e-3) < 1e-6


class _Tiny(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(3, 4)
        self.out = nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        (x,) = batch
        return self.out(torch.tanh(self.body(x))).square().mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.3)


def test_lightning_hooks_log_the_update_ratio_of_one_sgd_step(tmp_path):
    torch.manual_seed(0)
    module = _Tiny()
    before = {n: p.detach().clone() for n, p in module.named_parameters()}
    callback = ParameterStatsCallback(groups={"body": r"^body\.", "out": [r"^out\."]},
                                      keep_history=True)
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 3)),
                                       batch_size=8)
    trainer = L.Trainer(max_steps=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        callbacks=[callback], default_root_dir=tmp_path, accelerator="cpu")
    trainer.fit(module, data)
    for group in ("body", "out"):
        names = [n for n in before if n.startswith(group)]
        ratio, max_abs = _by_hand([before[n] for n in names],
                                  [dict(module.named_parameters())[n].detach() for n in names])
        logged = trainer.callback_metrics
        assert abs(logged[f"params/{group}/update_ratio"].item() - ratio) < 1e-6
        assert abs(logged[f"params/{group}/max_abs"].item() - max_abs) < 1e-6
    assert len(callback.history) == 1 and callback.history[0]["step"] == 0.0


def test_plot_parameter_stats_writes_a_png(tmp_path):
    history = [{"step": float(s), "params/t/update_ratio": 1.0 / (s + 1),
                "params/t/max_abs": 1e-3 * (s + 1)} for s in range(20)]
    path = plot_parameter_stats({"a": history, "b": history[:10]}, "t", tmp_path / "p.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
