"""Arrives with its own issue; the package exists so the distribution's layout is fixed."""
