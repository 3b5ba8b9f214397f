"""The test world: the systems an agent acts on, and the faults between them.

Everything here stands in for something outside the runtime, so that the runtime's tests, the
conformance suite, the Prove harness and the Temporal baselines can all act on the same world:

- ``world.target``: the payment target (a ledger, an access log, Idempotency-Key handling per
  tier, admin endpoints for hand refunds, key pruning and faults); ``world.target_client``: its
  clients.
- ``world.stripe_target``: the official stripe SDK against the target's Stripe-shaped subset
  (EMULATED: Stripe itself is not reachable from here).
- ``world.fault_proxy``: a TCP proxy that drops, delays or cuts connections on command.
- ``world.model_stub``: an Anthropic-compatible model endpoint with scripted answers (EMULATED).
- ``world.temporal_server``: starts and stops the real Temporal dev server.

The world is a leaf: it imports the standard library and third-party SDKs only, never the
runtime's internals nor the harnesses (`make lint` checks it).
"""
