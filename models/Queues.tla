------------------------------- MODULE Queues -------------------------------
(***************************************************************************)
(* The promises of the surface around the core (docs/queues.md,           *)
(* docs/timeouts.md, docs/design.md#run-end), for the runs of one limited  *)
(* queue served by several workers under leases:                           *)
(*                                                                         *)
(*   - bounded exclusion: at no time do more than Limit runs of the queue  *)
(*     hold a live lease, across workers, crashes and takeovers.  The      *)
(*     claim counts the live leases and takes rows in one step under the   *)
(*     queue's advisory lock (sql/queries/queues.sql queue_lock,           *)
(*     claim_limited).  BROKEN = "count_outside_lock" reads the count in   *)
(*     one step and claims in a later one, as a claim without the lock     *)
(*     does: two workers can both take the last slot.  A heartbeat's      *)
(*     renewal is two steps, its update and its commit, and a claim waits *)
(*     for renewals in flight (queue_running_settled locks the running    *)
(*     rows first).  BROKEN = "renewal_not_awaited" claims on the leases  *)
(*     as last committed: a renewal that lands after the count fills the *)
(*     queue past its limit (the failover that delays a commit).          *)
(*   - an execution timeout never fires before its deadline by the         *)
(*     database clock: the sweep ends unheld runs at now() >= deadline,    *)
(*     and a worker ends its own run at a durable call once its local      *)
(*     deadline passes, a deadline computed so that it can only fall late. *)
(*     BROKEN = "deadline_by_local_clock" reckons the deadline on a local  *)
(*     clock that runs Skew ahead of the database's.                      *)
(*   - a database fault moves a run back to be claimed, never to a         *)
(*     terminal state: the worker abandons it, nothing is written, its     *)
(*     lease expires and a claim takes it again.  BROKEN = "fault_ends_run" *)
(*     writes the fault as the run's failure (the asyncio worker's bug:    *)
(*     its pool lent the completion a fresh connection).                   *)
(*                                                                         *)
(* All runs are started at time 0 with the same execution deadline.       *)
(* Model check for the stated constants, not a proof of the Python or SQL. *)
(***************************************************************************)
EXTENDS Integers, FiniteSets, TLC

CONSTANTS Workers, Runs, Limit, MaxClock, LeaseTTL, Deadline, Skew, MaxCrashes, MaxFaults,
          BROKEN,
          InFlight   \* TRUE: a renewal's commit is a step of its own (else one step with it)

ASSUME BROKEN \in {"none", "count_outside_lock", "deadline_by_local_clock", "fault_ends_run",
                   "renewal_not_awaited"}
ASSUME InFlight \in BOOLEAN
ASSUME Limit \in 1..Cardinality(Runs) /\ LeaseTTL >= 1 /\ Skew >= 1

Ended == {"completed", "failed", "timed_out"}

VARIABLES
    now,            \* the database clock
    status,         \* ilr.workflows.status per run
    epoch,          \* ilr.workflows.epoch per run: +1 at every claim
    leaseExp,       \* ilr.workflows.lease_expires_at per run
    endedAt,        \* the database time of the run's end (-1 while it has not ended)
    up,             \* per worker: its process runs
    held,           \* per worker: the runs it executes, with the epoch it claimed
    seen,           \* per worker: the live count it read (broken variant; -1 when none)
    renewing,       \* per worker and run: the lease its uncommitted renewal writes (-1: none)
    crashes, faults,
    ghost           \* what happened, for the witnesses

vars == <<now, status, epoch, leaseExp, endedAt, up, held, seen, renewing, crashes, faults,
          ghost>>

TypeOK ==
    /\ now \in 0..MaxClock
    /\ status \in [Runs -> {"pending", "running"} \cup Ended]
    /\ epoch \in [Runs -> Nat] /\ leaseExp \in [Runs -> Int] /\ endedAt \in [Runs -> Int]
    /\ up \in [Workers -> BOOLEAN]
    /\ held \in [Workers -> [Runs -> Nat]]
    /\ seen \in [Workers -> -1..Cardinality(Runs)]
    /\ renewing \in [Workers -> [Runs -> Int]]
    /\ crashes \in 0..MaxCrashes /\ faults \in 0..MaxFaults

Init ==
    /\ now = 0
    /\ status = [r \in Runs |-> "pending"]
    /\ epoch = [r \in Runs |-> 0] /\ leaseExp = [r \in Runs |-> 0]
    /\ endedAt = [r \in Runs |-> -1]
    /\ up = [w \in Workers |-> TRUE]
    /\ held = [w \in Workers |-> [r \in Runs |-> 0]]     \* 0: not held
    /\ seen = [w \in Workers |-> -1]
    /\ renewing = [w \in Workers |-> [r \in Runs |-> -1]]
    /\ crashes = 0 /\ faults = 0
    /\ ghost = [takeover |-> FALSE, abandoned |-> FALSE, swept |-> FALSE, lateRenewal |-> FALSE]

-----------------------------------------------------------------------------
Live(r) == status[r] = "running" /\ leaseExp[r] > now
LiveCount == Cardinality({r \in Runs : Live(r)})
Claimable(r) == status[r] = "pending" \/ (status[r] = "running" /\ leaseExp[r] <= now)
Holds(w, r) == held[w][r] # 0
(* A renewal in flight holds its row: other writers wait, and SKIP LOCKED passes it by. *)
RowLocked(r) == \E v \in Workers : renewing[v][r] # -1
NoRenewalInFlight == \A r \in Runs : ~RowLocked(r)
(* The fence: the worker's epoch is the row's and its lease is live (docs/design.md#fence). *)
Fence(w, r) == Holds(w, r) /\ status[r] = "running" /\ epoch[r] = held[w][r] /\ leaseExp[r] > now

Take(w, r) ==
    /\ status' = [status EXCEPT ![r] = "running"]
    /\ epoch' = [epoch EXCEPT ![r] = @ + 1]
    /\ leaseExp' = [leaseExp EXCEPT ![r] = now + LeaseTTL]
    /\ held' = [held EXCEPT ![w][r] = epoch[r] + 1]
    /\ ghost' = [ghost EXCEPT !.takeover = @ \/ status[r] = "running"]

(* The claim under the queue's advisory lock: the count and the take are one step, after every
   renewal in flight has committed (the broken variant counts without waiting for them). *)
Claim(w, r) ==
    /\ BROKEN # "count_outside_lock"
    /\ NoRenewalInFlight \/ BROKEN = "renewal_not_awaited"
    /\ up[w] /\ ~Holds(w, r) /\ Claimable(r) /\ ~RowLocked(r) /\ LiveCount < Limit
    /\ Take(w, r)
    /\ UNCHANGED <<now, endedAt, up, seen, renewing, crashes, faults>>

(* Broken: the count is read first, the rows are taken later on what was read. *)
CountRead(w) ==
    /\ BROKEN = "count_outside_lock" /\ up[w] /\ seen[w] = -1
    /\ seen' = [seen EXCEPT ![w] = LiveCount]
    /\ UNCHANGED <<now, status, epoch, leaseExp, endedAt, up, held, renewing, crashes, faults,
                   ghost>>

ClaimOnRead(w, r) ==
    /\ BROKEN = "count_outside_lock" /\ up[w] /\ seen[w] \in 0..(Limit - 1)
    /\ ~Holds(w, r) /\ Claimable(r) /\ ~RowLocked(r)
    /\ Take(w, r)
    /\ seen' = [seen EXCEPT ![w] = -1]
    /\ UNCHANGED <<now, endedAt, up, renewing, crashes, faults>>

(* A heartbeat renews every run the worker holds in one statement: the update tests each fence
   and writes now + LeaseTTL, and the commit makes that visible later (a failover can delay it
   past the old leases' end). *)
Renews(w, r) == Fence(w, r) /\ ~RowLocked(r)
Heartbeat(w) ==
    /\ up[w] /\ \A r \in Runs : renewing[w][r] = -1
    /\ \E r \in Runs : Renews(w, r)
    /\ LET new == [r \in Runs |-> IF Renews(w, r) THEN now + LeaseTTL ELSE -1] IN
       IF InFlight
       THEN /\ renewing' = [renewing EXCEPT ![w] = new]
            /\ UNCHANGED leaseExp
       ELSE /\ leaseExp' = [r \in Runs |-> IF new[r] # -1 THEN new[r] ELSE leaseExp[r]]
            /\ UNCHANGED renewing
    /\ UNCHANGED <<now, status, epoch, endedAt, up, held, seen, crashes, faults, ghost>>

RenewalCommit(w) ==
    /\ \E r \in Runs : renewing[w][r] # -1
    /\ leaseExp' = [r \in Runs |-> IF renewing[w][r] # -1 THEN renewing[w][r] ELSE leaseExp[r]]
    /\ renewing' = [renewing EXCEPT ![w] = [r \in Runs |-> -1]]
    /\ ghost' = [ghost EXCEPT !.lateRenewal = @ \/ \E r \in Runs : renewing[w][r] # -1
                                                                  /\ leaseExp[r] <= now]
    /\ UNCHANGED <<now, status, epoch, endedAt, up, held, seen, crashes, faults>>

End(w, r, s) ==
    /\ status' = [status EXCEPT ![r] = s]
    /\ endedAt' = [endedAt EXCEPT ![r] = now]
    /\ held' = [held EXCEPT ![w][r] = 0]

(* The run's last write, fenced: it completes. *)
Finish(w, r) ==
    /\ up[w] /\ Fence(w, r) /\ ~RowLocked(r)
    /\ End(w, r, "completed")
    /\ UNCHANGED <<now, epoch, leaseExp, up, seen, renewing, crashes, faults, ghost>>

(* A worker whose claim is gone (fenced) lets the run go and writes nothing. *)
LetGo(w, r) ==
    /\ up[w] /\ Holds(w, r) /\ ~Fence(w, r)
    /\ held' = [held EXCEPT ![w][r] = 0]
    /\ UNCHANGED <<now, status, epoch, leaseExp, endedAt, up, seen, renewing, crashes, faults,
                   ghost>>

(* A worker ends its own run at a durable call once its local deadline has passed. It is
   computed from the claim's database time and a monotonic reading taken after the claim, so
   it falls at or after the database's deadline; the broken variant reckons it on a local
   clock Skew ahead. *)
LocalPast == IF BROKEN = "deadline_by_local_clock" THEN now + Skew >= Deadline
             ELSE now >= Deadline

OwnTimeout(w, r) ==
    /\ up[w] /\ Fence(w, r) /\ ~RowLocked(r) /\ LocalPast
    /\ End(w, r, "timed_out")
    /\ UNCHANGED <<now, epoch, leaseExp, up, seen, renewing, crashes, faults, ghost>>

(* The sweep (timeouts.expire) ends a run nobody holds once the database's clock is past its
   deadline: pending, or running with an expired lease. *)
Sweep ==
    \E r \in Runs :
        /\ Claimable(r) /\ ~RowLocked(r) /\ now >= Deadline
        /\ status' = [status EXCEPT ![r] = "timed_out"]
        /\ endedAt' = [endedAt EXCEPT ![r] = now]
        /\ ghost' = [ghost EXCEPT !.swept = TRUE]
        /\ UNCHANGED <<now, epoch, leaseExp, up, held, seen, renewing, crashes, faults>>

(* The database fails under one of the worker's runs (a restart, a failover, a killed backend):
   the run is abandoned and nothing is written (docs/design.md#run-end). The broken variant
   writes the fault as the run's failure through a connection made after it. *)
DbFault(w, r) ==
    /\ up[w] /\ Holds(w, r) /\ faults < MaxFaults
    /\ faults' = faults + 1
    /\ IF BROKEN = "fault_ends_run" /\ Fence(w, r) /\ ~RowLocked(r)
       THEN /\ End(w, r, "failed")
            /\ UNCHANGED ghost
       ELSE /\ held' = [held EXCEPT ![w][r] = 0]
            /\ ghost' = [ghost EXCEPT !.abandoned = TRUE]
            /\ UNCHANGED <<status, endedAt>>
    /\ UNCHANGED <<now, epoch, leaseExp, up, seen, renewing, crashes>>

(* A crash closes the worker's connections: a renewal it had in flight rolls back. *)
Crash(w) ==
    /\ up[w] /\ crashes < MaxCrashes
    /\ up' = [up EXCEPT ![w] = FALSE]
    /\ held' = [held EXCEPT ![w] = [r \in Runs |-> 0]]
    /\ seen' = [seen EXCEPT ![w] = -1]
    /\ renewing' = [renewing EXCEPT ![w] = [r \in Runs |-> -1]]
    /\ crashes' = crashes + 1
    /\ UNCHANGED <<now, status, epoch, leaseExp, endedAt, faults, ghost>>

Restart(w) ==
    /\ ~up[w] /\ up' = [up EXCEPT ![w] = TRUE]
    /\ UNCHANGED <<now, status, epoch, leaseExp, endedAt, held, seen, renewing, crashes, faults,
                   ghost>>

Tick ==
    /\ now < MaxClock /\ now' = now + 1
    /\ UNCHANGED <<status, epoch, leaseExp, endedAt, up, held, seen, renewing, crashes, faults,
                   ghost>>

Next ==
    \/ \E w \in Workers :
          \/ CountRead(w) \/ Crash(w) \/ Restart(w) \/ Heartbeat(w) \/ RenewalCommit(w)
          \/ \E r \in Runs : \/ Claim(w, r) \/ ClaimOnRead(w, r) \/ Finish(w, r) \/ LetGo(w, r) \/ OwnTimeout(w, r) \/ DbFault(w, r)
    \/ Sweep \/ Tick

Spec == Init /\ [][Next]_vars

Symm == Permutations(Workers) \cup Permutations(Runs)

-----------------------------------------------------------------------------
(* Invariants (docs/design.md#invariant-catalog). *)

(* Bounded exclusion: no more than Limit runs of the queue hold a live lease at once. *)
QueueConcurrencyBounded == LiveCount <= Limit

(* An execution timeout never fires before its deadline by the database clock. *)
ExecutionTimeoutNotEarly == \A r \in Runs : status[r] = "timed_out" => endedAt[r] >= Deadline

(* A database fault never ends a run: the model's workflow code never fails, so a failed run
   can only be a fault taken for the workflow's failure. *)
DatabaseFaultNeverEnds == \A r \in Runs : status[r] # "failed"

(* Reach_* witnesses (checked as ~P). *)
Reach_QueueFull == LiveCount = Limit /\ \E r \in Runs : status[r] = "pending"
Reach_QueueTakeover == ghost.takeover
Reach_TimedOut == \E r \in Runs : status[r] = "timed_out"
Reach_SweptTimeout == ghost.swept
Reach_FaultAbandoned == ghost.abandoned
(* A renewal committed after the lease it renews had run out by the database clock. *)
Reach_LateRenewal == ghost.lateRenewal
=============================================================================
