"""Conformance suite for a DLPackExchangeAPI library, driven by ctypes.

Runs in any torch environment (2.4 and later) against the library named by
``TCDE_TEST_LIBRARY``; skipped when that variable is unset.
"""
