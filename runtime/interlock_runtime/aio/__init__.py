"""The asyncio shell (docs/async.md): the asyncio worker, its workflow context, its
connections and the async client."""
