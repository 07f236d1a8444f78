"""View steps the backend cannot compute, applied on the host: still views.

A view op whose result or operand has a dtype the backend refuses
(``torch.view_as_complex``, ``view_as_real``, ``.real``/``.imag`` of a complex
tensor, a transpose of one) cannot be recorded. Running it eagerly once gave a
copy: ``view_as_complex(x).mul_(2)`` left ``x`` unchanged, and
``view_as_real(y)[:, 0] = 5`` never reached ``y`` (wrong values, found by the
adversarial sweep). Here such an op stays a step of the view chain, like any
view: reading the view runs the op on the host on its base's current value, and
writing it runs the op on a host copy of the base, copies the new values in,
and uploads the base (the inverse eager PyTorch gets from sharing memory).
Both directions cost a transfer, as the eager fallback of such ops always did.
"""

from __future__ import annotations

from typing import Any

from .ir import Output
from .views import ViewStep


class EagerViewStep(ViewStep):
    """A :class:`ViewStep` computed by PyTorch's CPU kernel on host values."""

    __slots__ = ()

    def apply(self, record: Any, value: Output) -> Output:
        from .tensor import upload

        return upload(self.op(_host(value), *self.rest, **self.kwargs))

    def invert(self, record: Any, below: Output, updated: Output) -> Output:
        from .tensor import upload

        base = _host(below).clone()
        self.op(base, *self.rest, **self.kwargs).copy_(_host(updated))
        return upload(base)


def _host(value: Output) -> Any:
    """The CPU value of an IR value, running pending work it needs."""
    from .executor import executor
    from .tensor import wrap_output

    return executor().to_host(wrap_output(value), "eager view").detach()
