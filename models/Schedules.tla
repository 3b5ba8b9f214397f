------------------------------ MODULE Schedules ------------------------------
(***************************************************************************)
(* One interval schedule fired by several workers (docs/schedules.md,     *)
(* sql/queries/schedules.sql).  A firing pass is one transaction: it locks *)
(* the due schedule row (FOR UPDATE SKIP LOCKED: another pass skips it),   *)
(* records the tick in schedule_fires, whose primary key makes a second    *)
(* record of the same tick insert nothing (and then nothing is started),   *)
(* starts the tick's run and moves next_fire_at on.  A crash, or a         *)
(* failover to the synchronous standby, loses the open transactions and    *)
(* keeps every committed one.  A pause updates the row, so it waits for a  *)
(* pass that holds it, and a pass reads `paused` under its lock.          *)
(*                                                                         *)
(*   TickStartsAtMostOnce: no tick starts two runs.  Two guards hold it,   *)
(*   the row lock and the tick's keys (the fire's primary key, the run's   *)
(*   id made from the tick).  Either alone suffices at these constants     *)
(*   (TLC with the other removed finds no violation; PassWithoutLock is    *)
(*   the lock removed).  BROKEN = "no_lock_no_key" removes both.           *)
(*   PausedStartsNothing: no run is started by a pass that commits after   *)
(*   the pause.  BROKEN = "pass_without_lock" reads the due row without    *)
(*   locking it, so a pause can commit while the pass is open (the fire's  *)
(*   key still holds TickStartsAtMostOnce there).                          *)
(*                                                                         *)
(* Tick k falls due at time k.  Model check for the stated constants, not  *)
(* a proof of the Python or SQL.                                           *)
(***************************************************************************)
EXTENDS Integers, FiniteSets, TLC

CONSTANTS Workers, MaxTick, MaxClock, MaxCrashes, MaxFailovers, BROKEN

ASSUME BROKEN \in {"none", "no_lock_no_key", "pass_without_lock"}

Locking == BROKEN \notin {"no_lock_no_key", "pass_without_lock"}
Keyed == BROKEN # "no_lock_no_key"
Ticks == 1..MaxTick
NoTick == 0

VARIABLES
    now,            \* the database clock
    nextTick,       \* ilr.schedules.next_fire_at (as a tick number)
    paused,         \* ilr.schedules.paused, committed
    holder,         \* the worker whose open pass holds the row lock ({} or one worker)
    pass,           \* per worker: the tick its open pass decides (NoTick: no pass open)
    fires,          \* ilr.schedule_fires: the ticks recorded, committed
    runs,           \* per tick: the runs committed for it
    up, crashes, failovers,
    ghost

vars == <<now, nextTick, paused, holder, pass, fires, runs, up, crashes, failovers, ghost>>

TypeOK ==
    /\ now \in 0..MaxClock /\ nextTick \in 1..(MaxClock + MaxTick + 1) /\ paused \in BOOLEAN
    /\ holder \subseteq Workers /\ Cardinality(holder) <= 1
    /\ pass \in [Workers -> 0..MaxTick] /\ fires \subseteq Ticks
    /\ runs \in [Ticks -> 0..Cardinality(Workers)]
    /\ up \in [Workers -> BOOLEAN]

Init ==
    /\ now = 0 /\ nextTick = 1 /\ paused = FALSE
    /\ holder = {} /\ pass = [w \in Workers |-> NoTick]
    /\ fires = {} /\ runs = [k \in Ticks |-> 0]
    /\ up = [w \in Workers |-> TRUE] /\ crashes = 0 /\ failovers = 0
    /\ ghost = [afterPause |-> FALSE, lost |-> FALSE]

-----------------------------------------------------------------------------
(* A pass begins: the due row, not paused, locked (a held row is skipped). Without the lock it
   only reads the row. *)
BeginPass(w) ==
    /\ up[w] /\ pass[w] = NoTick /\ ~paused /\ nextTick <= MaxTick /\ nextTick <= now
    /\ IF Locking THEN holder = {} /\ holder' = {w} ELSE UNCHANGED holder
    /\ pass' = [pass EXCEPT ![w] = nextTick]
    /\ UNCHANGED <<now, nextTick, paused, fires, runs, up, crashes, failovers, ghost>>

(* Its commit: the fire recorded (with the key, a tick already recorded inserts nothing and
   nothing is started), the run started, next_fire_at moved on, the lock released. *)
CommitPass(w) ==
    LET k == pass[w]
        fresh == ~Keyed \/ k \notin fires IN
    /\ up[w] /\ k # NoTick
    /\ fires' = fires \cup {k}
    /\ runs' = IF fresh THEN [runs EXCEPT ![k] = @ + 1] ELSE runs
    /\ nextTick' = IF k + 1 > nextTick THEN k + 1 ELSE nextTick
    /\ holder' = holder \ {w}
    /\ pass' = [pass EXCEPT ![w] = NoTick]
    /\ ghost' = [ghost EXCEPT !.afterPause = @ \/ (fresh /\ paused)]
    /\ UNCHANGED <<now, paused, up, crashes, failovers>>

(* rt.pause_schedule: an UPDATE of the row, so it waits for the pass holding its lock. *)
Pause ==
    /\ ~paused /\ (Locking => holder = {})
    /\ paused' = TRUE
    /\ UNCHANGED <<now, nextTick, holder, pass, fires, runs, up, crashes, failovers, ghost>>

Resume ==
    /\ paused /\ (Locking => holder = {})
    /\ paused' = FALSE
    /\ nextTick' = IF now + 1 > nextTick THEN now + 1 ELSE nextTick  \* missed ticks not made up
    /\ UNCHANGED <<now, holder, pass, fires, runs, up, crashes, failovers, ghost>>

(* A worker dies: the server aborts its open pass (nothing of it was committed). *)
Crash(w) ==
    /\ up[w] /\ crashes < MaxCrashes
    /\ up' = [up EXCEPT ![w] = FALSE] /\ crashes' = crashes + 1
    /\ holder' = holder \ {w} /\ pass' = [pass EXCEPT ![w] = NoTick]
    /\ ghost' = [ghost EXCEPT !.lost = @ \/ pass[w] # NoTick]
    /\ UNCHANGED <<now, nextTick, paused, fires, runs, failovers>>

Restart(w) ==
    /\ ~up[w] /\ up' = [up EXCEPT ![w] = TRUE]
    /\ UNCHANGED <<now, nextTick, paused, holder, pass, fires, runs, crashes, failovers, ghost>>

(* The primary fails over to the synchronous standby: every open pass is lost, every
   committed one kept (a commit was acknowledged only once the standby had it). *)
Failover ==
    /\ failovers < MaxFailovers
    /\ failovers' = failovers + 1
    /\ holder' = {} /\ pass' = [w \in Workers |-> NoTick]
    /\ ghost' = [ghost EXCEPT !.lost = @ \/ \E w \in Workers : pass[w] # NoTick]
    /\ UNCHANGED <<now, nextTick, paused, fires, runs, up, crashes>>

Tick ==
    /\ now < MaxClock /\ now' = now + 1
    /\ UNCHANGED <<nextTick, paused, holder, pass, fires, runs, up, crashes, failovers, ghost>>

Next ==
    \/ \E w \in Workers : BeginPass(w) \/ CommitPass(w) \/ Crash(w) \/ Restart(w)
    \/ Pause \/ Resume \/ Failover \/ Tick

Spec == Init /\ [][Next]_vars

Symm == Permutations(Workers)

-----------------------------------------------------------------------------
(* Invariants (docs/design.md#invariant-catalog). *)
TickStartsAtMostOnce == \A k \in Ticks : runs[k] <= 1

PausedStartsNothing == ~ghost.afterPause

(* Reach_* witnesses (checked as ~P). *)
Reach_TickStarted == \E k \in Ticks : runs[k] = 1
Reach_PassLost == ghost.lost
Reach_PausedAfterFire == paused /\ \E k \in Ticks : runs[k] = 1
=============================================================================
