"""The environments a build or a check runs in, each made once into the dev cache:
torch releases (``torchenv``), free-threaded CPythons built from Debian's sources
(``freethreaded``, ``debsource``), another architecture under qemu-user (``emulation``,
``emulated``), Debian's own torch (``distro``) and the wheels an offline GPU machine
lacks (``gpu_carry``).

May import: ``base``, ``matrix``.
"""
