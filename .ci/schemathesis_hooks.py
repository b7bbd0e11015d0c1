"""Schemathesis hooks for .ci/schemathesis, which loads this file through SCHEMATHESIS_HOOKS.

The stateful phase follows createPet's 201 to the pet it names, and its check
ensure_resource_availability fails when that pet is gone. With an Idempotency-Key, a 201 can be
the replay of an earlier create whose pet was deleted since: issue 10's contract gives the first
answer again, "even if it was patched or deleted since", so that is not a lost pet. Hypothesis
replays whole scenarios and draws the same small keys and bodies in every phase, so such replays
do happen. In the stateful phase only, createPet is therefore sent without its Idempotency-Key.
The other phases still send generated keys: fresh creates, replays, 422 for a key drawn again
with another body, 400 for a malformed key.
"""

import schemathesis


@schemathesis.hook
def before_call(context, case, kwargs):
    meta = case.meta
    if meta is None or meta.phase.name != "stateful":
        return
    if case.operation.method.upper() != "POST" or case.operation.path != "/pets":
        return
    for name in [name for name in (case.headers or {}) if name.lower() == "idempotency-key"]:
        del case.headers[name]
