"""torch-c-dlpack-ext's building blocks, shipped beside the package; NOT a public API, and
free of import side effects (no torch import, no library selection, no subprocess).

Importing this package or any module of it has no side effects: no torch import, no
library selection, no subprocess. That is what lets the in-tree build backend, the
developer tools, the tests and the benchmarks import these modules normally, while
``import torch_c_dlpack_ext`` (the public face) runs the selector.

- :mod:`.naming`: the one definition of file names, labels, variable prefixes, paths;
- :mod:`.errors`: every error class of the shipped code (the public subset is
  re-exported by :mod:`torch_c_dlpack_ext.errors`); :mod:`.installsource`: where an
  installation came from (PEP 610's record); :mod:`.remedies`: the commands remedies name
  (reinstall, build from source);
- :mod:`.manifest`: the manifest schema, reading, writing and verification;
- :mod:`.dlpack_ctypes`: ctypes mirrors of the DLPack structs and the exchange table;
- :mod:`.run`: the one subprocess helper;
- :mod:`.trust`: what may be loaded (OpenSSH's StrictModes: owner and mode of the file
  and of every directory above it); :mod:`.buildlock`: the build lock and its owner,
  and what killed builds left;
- :mod:`.driver`, :mod:`.torchinstall`, :mod:`.headers`: the compiler driver (the
  native plan; the portable plan in :mod:`.portableplan`, the steps both builds take in
  :mod:`.buildsteps`, the torch checks in :mod:`.torchchecks`), a torch installation
  read from its files, the headers a build finds;
- :mod:`.toolchains`: gnu, darwin, msvc behind one ``Toolchain`` protocol (compiler,
  argv, library names, the ELF ABI audit);
- :mod:`.version`: the one source of the version.
"""
