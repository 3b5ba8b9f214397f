------------------------------- MODULE Signals -------------------------------
(***************************************************************************)
(* Suspend, signal and timer (docs/design.md#suspend).  One workflow:        *)
(*   seq 1  wait_signal("approve")      (no timeout: available_at = inf)   *)
(*   seq 2  sleep(SleepFor)             (until recorded at the first call) *)
(*   seq 3  wait_signal("approve")                                          *)
(* Workers claim it under leases and run the suspend transaction; rt.signal*)
(* inserts a signal row and wakes the workflow; crashes lose a worker.     *)
(*                                                                         *)
(* The suspend transaction fences first, which locks the workflow row; a   *)
(* concurrent rt.signal that also locks the row first either commits      *)
(* before it (the mailbox check sees the signal) or waits for it (and      *)
(* then wakes the sleeping row): no lost wakeup.  BROKEN =                 *)
(* "wake_only_if_sleeping" is the variant that inserts the signal and      *)
(* wakes only a sleeping row without locking it first: a suspend that      *)
(* runs between its insert and its commit misses the signal and sleeps    *)
(* forever.                                                                 *)
(*                                                                         *)
(* Model check for the stated constants, not a proof of the Python or SQL. *)
(***************************************************************************)
EXTENDS Integers, Sequences, FiniteSets, TLC

CONSTANTS Workers, MaxClock, LeaseTTL, SleepFor, MaxSignals, MaxCrashes, BROKEN

ASSUME BROKEN \in {"none", "wake_only_if_sleeping"}

Inf == MaxClock + 100          \* available_at = 'infinity'
Seqs == 1..3
Kind(s) == IF s = 2 THEN "sleep" ELSE "signal"
NoStep == -1

VARIABLES
    now,                        \* database clock
    status, epoch, leaseExp,    \* ilr.workflows
    availableAt, waiting,       \* ilr.workflows: available_at, waiting {seq, kind, until}
    steps,                      \* ilr.steps: seq -> output (signal id, until, or NoStep)
    sigs,                       \* ilr.signals: [committed, consumed] (consumed: seq or 0)
    sigOpen,                    \* broken variant: a signal inserted, not committed (0 or id)
    up, pc, myEpoch,            \* per worker
    crashes, ghost              \* ghost flags

vars == <<now, status, epoch, leaseExp, availableAt, waiting, steps, sigs, sigOpen, up, pc,
          myEpoch, crashes, ghost>>

NoWait == [seq |-> 0, kind |-> "none", until |-> -1]

TypeOK ==
    /\ now \in 0..MaxClock
    /\ status \in {"pending", "running", "sleeping", "completed"}
    /\ epoch \in Nat /\ leaseExp \in Int /\ availableAt \in Int
    /\ waiting.seq \in 0..3
    /\ steps \in [Seqs -> Int]
    /\ \A i \in DOMAIN sigs : sigs[i].committed \in BOOLEAN /\ sigs[i].consumed \in 0..3
    /\ up \in [Workers -> BOOLEAN] /\ pc \in [Workers -> {"idle", "run"}]
    /\ myEpoch \in [Workers -> Nat] /\ crashes \in 0..MaxCrashes

Init ==
    /\ now = 0
    /\ status = "pending" /\ epoch = 0 /\ leaseExp = 0 /\ availableAt = 0
    /\ waiting = NoWait
    /\ steps = [s \in Seqs |-> NoStep]
    /\ sigs = <<>> /\ sigOpen = 0
    /\ up = [w \in Workers |-> TRUE] /\ pc = [w \in Workers |-> "idle"]
    /\ myEpoch = [w \in Workers |-> 0]
    /\ crashes = 0
    /\ ghost = [timerEarly |-> FALSE, whileRunning |-> FALSE, earlyWake |-> FALSE]

-----------------------------------------------------------------------------
Frontier == IF \E s \in Seqs : steps[s] = NoStep
            THEN CHOOSE s \in Seqs : steps[s] = NoStep /\ \A t \in 1..(s - 1) : steps[t] # NoStep
            ELSE 0
Fence(w) == myEpoch[w] = epoch /\ status = "running" /\ leaseExp > now
Unconsumed == {i \in DOMAIN sigs : sigs[i].committed /\ sigs[i].consumed = 0}
RowLocked == sigOpen # 0 /\ BROKEN = "none"

Claim(w) ==
    /\ up[w] /\ pc[w] = "idle" /\ ~RowLocked
    /\ \/ status \in {"pending", "sleeping"} /\ availableAt <= now
       \/ status = "running" /\ leaseExp <= now
    /\ status' = "running" /\ epoch' = epoch + 1 /\ leaseExp' = now + LeaseTTL
    /\ pc' = [pc EXCEPT ![w] = "run"] /\ myEpoch' = [myEpoch EXCEPT ![w] = epoch + 1]
    /\ UNCHANGED <<now, availableAt, waiting, steps, sigs, sigOpen, up, crashes, ghost>>

(***************************************************************************)
(* The worker replays recorded steps and reaches the frontier call, where  *)
(* one fenced transaction does the mailbox check, the due-timer check, or  *)
(* the suspend (docs/design.md#suspend).  A recorded sleep keeps its first until, so an  *)
(* early wake re-suspends until the timer is due.                          *)
(***************************************************************************)
Suspend(w, s, until) ==
    /\ status' = "sleeping" /\ leaseExp' = now
    /\ waiting' = [seq |-> s, kind |-> Kind(s), until |-> until]
    /\ availableAt' = IF until < 0 THEN Inf ELSE until
    /\ UNCHANGED <<steps, sigs, ghost>>

Frontier_(w) ==
    LET s == Frontier IN
    /\ up[w] /\ pc[w] = "run" /\ ~RowLocked
    /\ IF ~Fence(w)
       THEN UNCHANGED <<status, leaseExp, availableAt, waiting, steps, sigs, ghost>>
       ELSE IF s = 0
       THEN /\ status' = "completed" /\ availableAt' = Inf
            /\ UNCHANGED <<leaseExp, waiting, steps, sigs, ghost>>
       ELSE IF Kind(s) = "signal"
       THEN IF Unconsumed # {}
            THEN LET i == CHOOSE i \in Unconsumed : \A j \in Unconsumed : i <= j IN
                 /\ sigs' = [sigs EXCEPT ![i].consumed = s]
                 /\ steps' = [steps EXCEPT ![s] = i]
                 /\ waiting' = NoWait
                 /\ UNCHANGED <<status, leaseExp, availableAt, ghost>>
            ELSE Suspend(w, s, -1)
       ELSE LET until == IF waiting.seq = s THEN waiting.until ELSE now + SleepFor IN
            IF now >= until
            THEN /\ steps' = [steps EXCEPT ![s] = until]
                 /\ ghost' = [ghost EXCEPT !.timerEarly = @ \/ now < until]
                 /\ waiting' = NoWait
                 /\ UNCHANGED <<status, leaseExp, availableAt, sigs>>
            ELSE Suspend(w, s, until)
    /\ pc' = IF Fence(w) /\ s # 0 /\ status' = "running" THEN pc ELSE [pc EXCEPT ![w] = "idle"]
    /\ UNCHANGED <<now, epoch, sigOpen, up, myEpoch, crashes>>

(***************************************************************************)
(* rt.signal (docs/design.md#suspend): lock the workflow row, insert the signal, set    *)
(* available_at = now() and turn sleeping into pending for every          *)
(* non-terminal status, in one transaction.                                *)
(***************************************************************************)
Signal ==
    /\ BROKEN = "none" /\ Len(sigs) < MaxSignals /\ status # "completed"
    /\ sigs' = Append(sigs, [committed |-> TRUE, consumed |-> 0])
    /\ availableAt' = now
    /\ status' = IF status = "sleeping" THEN "pending" ELSE status
    /\ ghost' = [ghost EXCEPT !.whileRunning = @ \/ status = "running",
                              !.earlyWake = @ \/ (status = "sleeping" /\ waiting.kind = "sleep")]
    /\ UNCHANGED <<now, epoch, leaseExp, waiting, steps, sigOpen, up, pc, myEpoch, crashes>>

(* Broken: insert the row and wake the workflow only if it is sleeping right now, without
   locking it; the insert becomes visible at the commit, a step later. *)
SignalBegin ==
    /\ BROKEN = "wake_only_if_sleeping" /\ Len(sigs) < MaxSignals /\ sigOpen = 0
    /\ status # "completed"
    /\ sigs' = Append(sigs, [committed |-> FALSE, consumed |-> 0])
    /\ sigOpen' = Len(sigs) + 1
    /\ IF status = "sleeping"
       THEN availableAt' = now /\ status' = "pending"
       ELSE UNCHANGED <<availableAt, status>>
    /\ ghost' = [ghost EXCEPT !.whileRunning = @ \/ status = "running",
                              !.earlyWake = @ \/ (status = "sleeping" /\ waiting.kind = "sleep")]
    /\ UNCHANGED <<now, epoch, leaseExp, waiting, steps, up, pc, myEpoch, crashes>>

SignalCommit ==
    /\ sigOpen # 0
    /\ sigs' = [sigs EXCEPT ![sigOpen].committed = TRUE]
    /\ sigOpen' = 0
    /\ UNCHANGED <<now, status, epoch, leaseExp, availableAt, waiting, steps, up, pc, myEpoch,
                   crashes, ghost>>

Crash(w) ==
    /\ up[w] /\ crashes < MaxCrashes
    /\ up' = [up EXCEPT ![w] = FALSE] /\ pc' = [pc EXCEPT ![w] = "idle"]
    /\ crashes' = crashes + 1
    /\ UNCHANGED <<now, status, epoch, leaseExp, availableAt, waiting, steps, sigs, sigOpen,
                   myEpoch, ghost>>

Restart(w) ==
    /\ ~up[w] /\ up' = [up EXCEPT ![w] = TRUE]
    /\ UNCHANGED <<now, status, epoch, leaseExp, availableAt, waiting, steps, sigs, sigOpen, pc,
                   myEpoch, crashes, ghost>>

Tick ==
    /\ now < MaxClock /\ now' = now + 1
    /\ UNCHANGED <<status, epoch, leaseExp, availableAt, waiting, steps, sigs, sigOpen, up, pc,
                   myEpoch, crashes, ghost>>

Next ==
    \/ \E w \in Workers : Claim(w) \/ Frontier_(w) \/ Crash(w) \/ Restart(w)
    \/ Signal \/ SignalBegin \/ SignalCommit \/ Tick

Spec == Init /\ [][Next]_vars

Symm == Permutations(Workers)

-----------------------------------------------------------------------------
(* Invariants (docs/design.md#invariant-catalog). *)
TimerNotEarly == ~ghost.timerEarly /\ (steps[2] # NoStep => steps[2] >= 0)

SignalExactlyOnceConsumed ==
    /\ \A i \in DOMAIN sigs : sigs[i].consumed # 0 =>
            /\ Kind(sigs[i].consumed) = "signal" /\ steps[sigs[i].consumed] = i
            /\ \A j \in DOMAIN sigs : j # i => sigs[j].consumed # sigs[i].consumed
    /\ \A s \in {1, 3} : steps[s] # NoStep => (steps[s] \in DOMAIN sigs /\ sigs[steps[s]].consumed = s)

NoLostWakeup ==
    ~(status = "sleeping" /\ availableAt = Inf /\ waiting.kind = "signal" /\ Unconsumed # {})

(* Reach_* witnesses (checked as ~P). *)
Reach_TimerFired == steps[2] # NoStep
Reach_EarlyWake == ghost.earlyWake
Reach_SignalConsumed == \E i \in DOMAIN sigs : sigs[i].consumed # 0
Reach_SignalWhileRunning == ghost.whileRunning
=============================================================================
