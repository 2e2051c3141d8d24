"""Per-cell builds and wheel assembly: what this host can build (``host``), the
builds themselves (``cellbuild``), what they produce, their progress and manifests
(``cellresults``), dist/'s combined, variant and universal wheels and
the sdist (``wheels``), CI's job wheels (``jobwheels``), PEP 825 metadata
(``variants``) and the Linux repair (``repair``).

May import: ``base``, ``matrix``, ``envs``.
"""
