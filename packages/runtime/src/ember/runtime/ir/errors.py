"""Errors raised by the IR layer."""

from __future__ import annotations


class IRError(Exception):
    """Base class of Ember IR errors."""


class IRFormatError(IRError):
    """A file or text that is not a valid Ember program: the message names what is wrong
    (and where, when it can). Raised instead of ever falling back to unsafe loading."""


class VerificationError(IRError):
    """A program that breaks an IR or dialect rule; the message names the node."""


class UntrustedProgramError(IRError):
    """A program read from a file asks for something that needs the caller's opt-in:
    running code it carries (a ``compiled`` artifact) or an operator with effects outside
    its tensors (files, processes, printing). The message names what and the opt-in."""
