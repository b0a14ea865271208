"""What a run leaves on disk and on the console, around the training system (:mod:`vitbert.lit`).

* :mod:`.checkpoints`: one folder per run, ``last.ckpt`` always current, ``runs/latest``, exact
  resume (the random generators) and a checkpoint on SIGTERM;
* :mod:`.console`: the model's size at the start, progress lines a log file can hold, and the
  figures as one table at the end;
* :mod:`.predictions`: the JSON Lines file ``train.py predict`` writes.

The CLI (:mod:`vitbert.cli`) adds these callbacks to every Trainer; none of them changes what is
trained or measured, and the core never imports them.
"""
