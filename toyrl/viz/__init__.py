"""Pure plotting and analysis functions behind the notebooks' figures and widgets.

Each module serves one notebook and is imported by its full name (nothing is imported here, so
modules can be added without registering them):

- ``toyrl.viz.plots``       shared matplotlib helpers: token colours, masked heatmaps, run-log curves
- ``toyrl.viz.style``       figure styles: ``style="notebook"`` (default) or ``"slides"`` (large text, >= 1600 px)
- ``toyrl.viz.trajectory``  notebook 00: a rollout turn by turn, flat vs turn view, a training log
- ``toyrl.viz.setting``     the setting words every figure title names (env, who played, group)
- ``toyrl.viz.credit_batch`` notebook 01's batch: a noisy expert's rollouts and what each estimator needs
- ``toyrl.viz.credit``      notebook 01: every estimator on one batch, GiGPO anchor groups on the map
- ``toyrl.viz.echo``        notebook 02: the Echo Trap, collapse-step detection, precomputed runs
- ``toyrl.viz.ratios``      notebook 03: env-token masking, ratio levels, clipping under staleness
- ``toyrl.viz.void``, ``context``, ``critics``, ``trees``, ``aggregation``, ``prototype``: notebooks 04-10
- ``toyrl.viz.small_llm``   notebook 09: TinyLM's precomputed GRPO / GiGPO runs, the reply-temperature panel

A widget callback is a thin wrapper: ``fig = toyrl.viz.credit.plot_estimators(...)`` with the slider
values as keyword arguments; the ``tests/test_viz_*.py`` files call the same functions over each slider range.
"""
