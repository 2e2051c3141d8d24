"""The per-call cost of the two kinds of table users are shown, generated from
``benchmarks/results`` by ``nox -s bench`` (a cog block, :mod:`devtools.base.generated`;
``nox -s lint`` fails when it differs from those results): never edit the figures here.

``PORTABLE_COST``: medians in ns, export (``from_py_object`` and its deleter) / allocator
(float32[16], CPU), of the native library (the exchange benchmark's "ours") and the
portable table as shipped (abi3, the portable benchmark's torch 2.13 comparison);
``MEASURED_ON``: the torch and the machine they come from, which every text quoting them
names.
"""

# [[[cog
# from benchmarks.pages import cost_figures
# cog.out(cost_figures(results_dir))
# ]]]
PORTABLE_COST = {
    "native_export_ns": 35,
    "native_allocator_ns": 122,
    "portable_export_ns": 1178,
    "portable_allocator_ns": 1305,
}
MEASURED_ON = "torch 2.13.0+cpu, AMD EPYC, 2 cores, 2026-12-08"
# [[[end]]]
