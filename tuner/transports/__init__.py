"""Transports: how launchers reach the host a server runs on (:mod:`tuner.transports.ssh`)."""
