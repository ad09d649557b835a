"""``lite quickstart``: the whole toolchain end to end on built-in data.

This package sits above every other one (it may import lite, converter, serving and train, as the
tests do); nothing imports it.
"""
