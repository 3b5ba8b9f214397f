"""The Temporal baselines of the Prove harness (docs/design.md#refund-case): the refund workflow on temporalio.

- ``baselines.refund``: the workflow, the decision activity and the two refund activities,
  (a) ``temporal_idem`` with Temporal's recommended key and (b) ``temporal_check`` with the
  pre-send check; the attempt log.
- ``baselines.worker``: ``python -m baselines.worker ...``, one worker subprocess.
- ``baselines.client``: start, approve, result, describe, history JSON, reset.
"""

MODES = ("temporal_idem", "temporal_check")
