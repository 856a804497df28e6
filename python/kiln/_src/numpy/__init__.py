"""kiln.numpy implementation modules, built only on kiln.lax, kiln._src.core and kiln._src.dtypes.

The public namespace is kiln/numpy/__init__.py, which star-imports these modules' __all__.
"""
