"""When the whole-split figures (captions, binding, retrieval) are measured in a fit."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from lightning.pytorch.trainer.states import TrainerFn

from vitbert.lit.evaluation import SplitEvaluation


class Recorder(SplitEvaluation):
    """Records the validations it measures instead of measuring them."""

    def __init__(self, every_n_epochs: int) -> None:
        super().__init__(num_images=8, every_n_epochs=every_n_epochs)
        self.measured: list[int] = []

    def _log(self, trainer, pl_module, stage, limit) -> None:
        self.measured.append(trainer.current_epoch + 1)


def trainer(epoch: int, fn: TrainerFn = TrainerFn.FITTING, max_epochs: int | None = 5,
            max_steps: int = -1, global_step: int = 0, check_val_every_n_epoch: int = 1
            ) -> SimpleNamespace:
    return SimpleNamespace(state=SimpleNamespace(fn=fn), current_epoch=epoch,
                           max_epochs=max_epochs, max_steps=max_steps, global_step=global_step,
                           check_val_every_n_epoch=check_val_every_n_epoch,
                           sanity_checking=False)


@pytest.mark.parametrize(("every", "measured"), [(1, [1, 2, 3, 4, 5]), (2, [2, 4, 5]),
                                                 (3, [3, 5]), (9, [5])])
def test_a_fit_measures_every_nth_epoch_and_the_last(every, measured):
    recorder = Recorder(every)
    for epoch in range(5):
        recorder.on_validation_epoch_end(trainer(epoch), None)
    assert recorder.measured == measured


def test_the_last_validation_is_measured_when_the_trainer_validates_every_few_epochs():
    """32 epochs validated every 5th: the validation after epoch 30 is the fit's last."""
    recorder = Recorder(32)
    for epoch in range(4, 32, 5):  # the epochs Lightning validates after: 5, 10, ..., 30
        recorder.on_validation_epoch_end(trainer(epoch, max_epochs=32,
                                                 check_val_every_n_epoch=5), None)
    assert recorder.measured == [30]


def test_a_fit_that_ends_on_max_steps_measures_its_last_validation():
    recorder = Recorder(4)
    recorder.on_validation_epoch_end(trainer(0, max_epochs=-1, max_steps=10, global_step=6), None)
    recorder.on_validation_epoch_end(trainer(1, max_epochs=-1, max_steps=10, global_step=10), None)
    assert recorder.measured == [2]


def test_validate_always_measures():
    recorder = Recorder(3)
    recorder.on_validation_epoch_end(trainer(0, TrainerFn.VALIDATING), None)
    assert recorder.measured == [1]


def test_every_n_epochs_is_a_count():
    with pytest.raises(ValueError, match="every_n_epochs=0"):
        Recorder(0)


@pytest.mark.parametrize("evaluation", ["captions", "retrieval"])
def test_the_whole_split_evaluations_are_off_by_default_and_a_config_switches_them_on(
        evaluation):
    """--captions.*, --retrieval.*: 0 pictures (off) unless a config asks; the embedded
    default's configs/default.yaml asks for each."""
    from helpers import train_cli

    from vitbert.cli import DEFAULT_CONFIG
    from vitbert.lit.evaluation import CaptionEvaluation
    from vitbert.lit.retrieval import RetrievalEvaluation

    kind = {"captions": CaptionEvaluation, "retrieval": RetrievalEvaluation}[evaluation]
    assert kind().num_images == 0

    def parse(*args: str) -> dict:
        args = ["fit", "--config", str(DEFAULT_CONFIG), *args]  # as train.py parses them
        return train_cli(args).parser.parse_args(args).fit.as_dict()[evaluation]

    bare = train_cli(["fit"])._parser("fit").get_defaults()  # no config: the class defaults
    assert bare[evaluation].num_images == 0
    assert parse()["num_images"] > 0  # the embedded default asks for it
    assert parse(f"--{evaluation}.num_images", "7")["num_images"] == 7
