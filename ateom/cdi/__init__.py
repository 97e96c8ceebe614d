"""The CDI layer: read, validate and resolve Container Device Interface specs.

names -> parse -> schema -> validate -> spec_file -> registry (resolve) -> edits.
See docs/cdi.md. Nothing here is imported eagerly, so ``import ateom.cdi.model``
stays cheap for code that only needs the dataclasses.
"""
