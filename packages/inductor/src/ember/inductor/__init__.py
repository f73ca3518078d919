"""ember-inductor: core-functional programs -> compiled artifacts (fused C++/Triton
kernels and a Python wrapper). See README.md; the stage is
:class:`ember.inductor.stage.InductorStage`, the driver
:func:`ember.inductor.compile.compile_program`, the loop-level IR
:mod:`ember.inductor.loop_ir`."""
