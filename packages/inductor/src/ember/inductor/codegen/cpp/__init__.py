"""The C++/OpenMP kernel backend for CPU tensors."""

from ember.inductor.codegen.cpp.backend import CppBackend

__all__ = ["CppBackend"]
