"""Conformance suites: the differential exchange-API suite (hypothesis) and import totality."""
