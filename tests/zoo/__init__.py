"""Trained models shipped inside public PyPI wheels, converted and checked end to end."""
