"""Training: a config in, a run log out.

- ``config``: ``TrainConfig``, every switch of a run, and its validation;
- ``build``, ``limits``: building a run's policy from its name, and the context it may read;
- ``trainer``: ``Trainer`` (collect -> advantages -> loss -> optimizer step) and ``train``;
- ``credit_models``: the learned credit models the trainer fits beside the policy (critics, progress, info gain);
- ``bc``, ``pretrain``: behaviour cloning on the shipped demonstrations, TinyLM's pretraining;
- ``runlog``: ``RunLog``, one row of metrics per step as JSON lines.

    from toyrl.train import TrainConfig, train
    log = train(TrainConfig(env="bandit_chain", estimator="grpo", steps=60))
"""
from .config import TrainConfig
from .runlog import RunLog
from .trainer import Trainer, train

__all__ = ["TrainConfig", "train", "Trainer", "RunLog"]
