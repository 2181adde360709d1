"""The support package: everything the eight top-level modules stand on that is not the method.
README.md's Layout table (the `lib/` row) says what each file holds.

Imports run one way: the top level imports this package; nothing here imports the top level.
"""
