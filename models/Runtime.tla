------------------------------- MODULE Runtime -------------------------------
(***************************************************************************)
(* Interlock Runtime: one workflow, a plain step, then one gated effect    *)
(* (two with TWO_EFFECTS, run in sequence, under one or two grants).       *)
(* Claims and the eager fence, heartbeats, step rows, T_dispatch as begin  *)
(* + commit with a local SQL premise, the send under a watchdog, a target  *)
(* with a dedup store and a settle bound, T_commit, the late-result path,  *)
(* recovery by tier with T_resolve, and world events (revoke, hand refund, *)
(* cancel, prune, redecide, a change to the local premise).                *)
(*                                                                         *)
(* MODE "interlock" is the runtime; "temporal_idem" and                    *)
(* "temporal_precheck" are the Temporal baselines (server-scheduled        *)
(* attempts with a stable idempotency key, the second with non-atomic      *)
(* pre-send reads).  BROKEN selects one deliberately wrong variant.        *)
(*                                                                         *)
(* Model check for the stated constants, not a proof of the Python or SQL. *)
(* Assumptions (docs/design.md#assumptions): A1 no pause across the local  *)
(* send deadline (PAUSE lifts it), A2 the target finishes a request within *)
(* SettleMargin after its send_deadline (SERVER_SLOW lifts it), A3         *)
(* external premises are true as of their read (PremiseTrueAtSend shows    *)
(* the window), A4 durable commits, A5 the database and worker clocks tick *)
(* together, except that a failover (the event "failover") may move the    *)
(* database clock by ClockJump ticks at once: the new primary's clock.     *)
(* MaxSkew is the allowance the runtime is configured with (the worker's   *)
(* --max-clock-skew shortens its local deadlines; settle_margin covers the *)
(* target's bound plus MaxSkew); SkewPastAllowance jumps past it.          *)
(***************************************************************************)
EXTENDS Integers, Sequences, FiniteSets, TLC

CONSTANTS
    Workers,        \* worker processes, e.g. {w1, w2} (model values)
    Tier,           \* 1, 2 or 3
    Queryable,      \* the target answers a lookup by key (tier 1 Stripe-like: TRUE)
    MODE,           \* "interlock" | "temporal_idem" | "temporal_precheck"
    BROKEN,         \* "none" or one of the broken variants in the ASSUME below
    PAUSE,          \* A1 lifted: a process frozen across its local deadline sends when it thaws
    SERVER_SLOW,    \* A2 lifted: the target may finish a request at any later time
    TWO_EFFECTS,    \* the workflow runs two gated effects in sequence (effect ids 1 and 2)
    SHARED_GRANT,   \* with TWO_EFFECTS: both under grant 1 (else effect e is under grant e)
    Events,         \* the world events that may happen, each at most once (revoke: per grant)
    MaxClock, LeaseTTL, SendTimeout, SettleMargin,
    DedupAge,       \* dedup_window - DEDUP_MARGIN: the protocol's tier-1 horizon
    DedupMargin,    \* DEDUP_MARGIN: the target keeps a key for DedupAge + DedupMargin ticks
    MaxCrashes,
    ClockJump,      \* how far a failover moves the database clock, in ticks (0: no failover)
    JumpBack,       \* TRUE: the new primary's clock is behind (the jump is -ClockJump)
    MaxSkew,        \* the clock jump the runtime allows for (worker --max-clock-skew)
    MaxAttempts,    \* Temporal: attempts of the refund activity explored (unlimited in Temporal)
    URGENT          \* time advances only when no protocol step can happen (liveness)

ASSUME /\ Tier \in {1, 2, 3}
       /\ Queryable \in BOOLEAN /\ PAUSE \in BOOLEAN /\ SERVER_SLOW \in BOOLEAN
       /\ TWO_EFFECTS \in BOOLEAN /\ SHARED_GRANT \in BOOLEAN
       /\ MODE \in {"interlock", "temporal_idem", "temporal_precheck"}
       /\ BROKEN \in {"none", "naive_recovery", "no_fencing", "grant_check_outside_txn",
                      "commit_without_checkpoint", "recover_before_deadline",
                      "stopwatch_after_dispatch", "late_ack_dropped", "no_local_lease_check",
                      "early_takeover", "fence_without_epoch", "unfenced_commit",
                      "revoke_list_by_deadline", "no_local_recheck", "tier_at_read"}
       /\ Events \subseteq {"revoke", "hand_refund_full", "hand_refund_partial", "cancel",
                            "prune_keys", "redecide", "local_change", "failover"}
       /\ LeaseTTL > SendTimeout
       /\ ClockJump \in Nat /\ JumpBack \in BOOLEAN /\ MaxSkew \in Nat
       /\ LeaseTTL > MaxSkew /\ SettleMargin >= MaxSkew
       \* the Temporal baselines model one activity (their keys 1 and 2 are its two runs)
       /\ TWO_EFFECTS => MODE = "interlock"

Interlock == MODE = "interlock"
Temporal == ~Interlock
Broken(b) == BROKEN = b
Payload0 == 20          \* the decided and approved amount (rt.approve binds it to the grant)
Payload1 == 30          \* what a redecision offers
Nobody == "nobody"
Terminal == {"completed", "cancelled"}
(* The worker's local lease deadline runs MaxSkew short of the lease, so that a new primary
   whose clock is ahead by up to MaxSkew takes over only after the old holder stopped. *)
LocalTTL == LeaseTTL - MaxSkew

(***************************************************************************)
(* Effects are numbered in workflow order; effect e has the step row       *)
(* StepOf(e), the idempotency key e (the Temporal baselines use keys 1 and *)
(* 2 for the runs of their one activity) and the grant GrantOf(e).        *)
(***************************************************************************)
NEffects == IF TWO_EFFECTS THEN 2 ELSE 1
Effs == 1..NEffects
GrantOf(e) == IF SHARED_GRANT THEN 1 ELSE e
Grants == {GrantOf(e) : e \in Effs}
StepOf(e) == IF e = 1 THEN "effect" ELSE "effect2"
Steps == {"plain"} \cup {StepOf(e) : e \in Effs}
(* After effect e the workflow goes on to the next effect, or returns. *)
NextPc(e) == IF e < NEffects THEN "effect" ELSE "finish"
NextEff(e) == IF e < NEffects THEN e + 1 ELSE e

VARIABLES
    now,                                    \* the database clock
    wfStatus, wfEpoch, leaseExp,            \* ilr.workflows
    stepRow, rowWrites, plainRerun,         \* ilr.steps; ghost counters
    effState, boundPayload, dispEpoch,      \* ilr.effects, per effect (dispEpoch: the pair)
    firstDispatch, sendDeadline, journal,   \* ilr.effects clocks; entries [eff, kind, via]
    grantRevoked, revokeReturned,           \* ilr.grants, per grant; the set rt.revoke returned
    handRefund, cancelReq, offer, localOk,  \* external premise; cancel; offer; local premise
    up, ws,                                 \* per worker: process alive; its memory
    wire, ledger, keys, keysPruned,         \* the target: requests, applications, dedup keys
    sends, effSends, sendBad, lastSendDL,   \* ghost: requests; per effect; failed send checks
    lateResults, lateAcks, crashes, ghost,  \* ghost counters and flags
    tAttempt, tStart, tHolder, tKey         \* Temporal server: attempts, start, holder, key

wfVars == <<wfStatus, wfEpoch, leaseExp>>
stepVars == <<stepRow, rowWrites, plainRerun>>
effVars == <<effState, boundPayload, dispEpoch, firstDispatch, sendDeadline, journal>>
worldVars == <<grantRevoked, revokeReturned, handRefund, cancelReq, offer, localOk>>
targetVars == <<wire, ledger, keys, keysPruned>>
histVars == <<sends, effSends, sendBad, lastSendDL, lateResults, lateAcks, crashes, ghost>>
temporalVars == <<tAttempt, tStart, tHolder, tKey>>
vars == <<now, wfVars, stepVars, effVars, worldVars, up, ws, targetVars, histVars,
          temporalVars>>

(***************************************************************************)
(* A worker's memory.  pc is where it is in the workflow, eff the effect   *)
(* it is at; epoch the claim it believes it holds; deadline its local      *)
(* lease deadline t0 + LeaseTTL (re-armed by every write that renewed the  *)
(* lease, and by a heartbeat; pulled to now by a heartbeat that found the  *)
(* run fenced, which is how the code's `run.fenced` flag stops the next    *)
(* step); snap the step rows it loaded; sendBy its send budget (the        *)
(* watchdog); meta what the authorizing transaction established for the   *)
(* next send.                                                              *)
(***************************************************************************)
NoMeta == [liveClaim |-> FALSE, grantOk |-> FALSE, premiseOk |-> FALSE, payload |-> 0,
           recheckOk |-> FALSE, afterCancel |-> FALSE, pastWindow |-> FALSE,
           deadline |-> -1, key |-> 0, recovery |-> FALSE, eff |-> 1]
IdleW == [pc |-> "idle", epoch |-> 0, deadline |-> -1, snap |-> FALSE, readOk |-> FALSE,
          grantRead |-> FALSE, sendBy |-> -1, txnNow |-> -1, fenced |-> FALSE,
          found |-> FALSE, effTier |-> 0, readPair |-> 0, meta |-> NoMeta, via |-> "send",
          awaitId |-> 0, attempt |-> 0, eff |-> 1]
(* ambTier and lastRecheckFailed per effect: what recovery knew when it wrote AMBIGUOUS.
   revokeMissed: some request applied at the target after its grant's revoke committed, for
   an effect that revoke did not return.  resendAfterCancel: a recovery resend was authorized
   after the cancel committed (allowed: it finishes a dispatch authorized before the cancel). *)
GhostFlags == [unfenced |-> FALSE, earlyTakeover |-> FALSE, tookOver |-> FALSE,
               lastRecheckFailed |-> [e \in Effs |-> FALSE], ambTier |-> [e \in Effs |-> 0],
               recoverySent |-> FALSE, revokeMissed |-> FALSE, resendAfterCancel |-> FALSE,
               renewed |-> FALSE, jumped |-> FALSE,
               takeoverAfterJump |-> FALSE, recoverySendAfterJump |-> FALSE]
(***************************************************************************)
(* The send history is kept as monotone flags, one per send invariant:    *)
(* "some send so far failed this check".  Every send invariant is a       *)
(* for-all over sends, so this is equivalent to a log and keeps the state  *)
(* space small; the trace shows the sends themselves.                     *)
(***************************************************************************)
NoBad == [liveClaim |-> FALSE, grantOk |-> FALSE, premiseOk |-> FALSE, recheck |-> FALSE,
          payload |-> FALSE, cancel |-> FALSE, revoke |-> FALSE, premiseAtSend |-> FALSE,
          overlap |-> FALSE, tier3 |-> FALSE]
PCs == {"idle", "load", "run", "plain", "effect", "dbegin", "dcommit", "send", "await",
        "tcommit", "ckpt", "recover", "resolve", "finish", "tread", "tsend", "tawait", "tdone"}

TypeOK ==
    /\ now \in 0..MaxClock
    /\ wfStatus \in {"pending", "running", "completed", "cancelled"}
    /\ wfEpoch \in Nat /\ leaseExp \in Int
    /\ stepRow \in [Steps -> BOOLEAN] /\ rowWrites \in [Steps -> Nat] /\ plainRerun \in Nat
    /\ effState \in [Effs -> {"none", "proposed", "dispatched", "committed", "ambiguous"}]
    /\ boundPayload \in [Effs -> {0, Payload0, Payload1}] /\ offer \in {Payload0, Payload1}
    /\ dispEpoch \in [Effs -> Nat] /\ firstDispatch \in [Effs -> Int]
    /\ sendDeadline \in [Effs -> Int]
    /\ grantRevoked \in [Grants -> BOOLEAN] /\ revokeReturned \in [Grants -> SUBSET Effs]
    /\ handRefund \in {0, 10, 20} /\ cancelReq \in BOOLEAN /\ localOk \in BOOLEAN
    /\ up \in [Workers -> BOOLEAN]
    /\ \A w \in Workers : ws[w].pc \in PCs /\ ws[w].epoch \in Nat /\ ws[w].snap \in BOOLEAN
                          /\ ws[w].eff \in Effs
    /\ ledger \in [Effs -> Nat] /\ keysPruned \in BOOLEAN /\ keys \subseteq {1, 2}
    /\ effSends \in [Effs -> Nat] /\ lastSendDL \in [Effs -> Int]
    /\ lateResults \in Nat /\ lateAcks \in Nat /\ crashes \in 0..MaxCrashes
    /\ tKey \in {1, 2} /\ tHolder \in Workers \cup {Nobody}

-----------------------------------------------------------------------------
Init ==
    /\ now = 0
    /\ wfStatus = "pending" /\ wfEpoch = 0 /\ leaseExp = 0
    /\ stepRow = [s \in Steps |-> FALSE] /\ rowWrites = [s \in Steps |-> 0] /\ plainRerun = 0
    /\ effState = [e \in Effs |-> "none"] /\ boundPayload = [e \in Effs |-> 0]
    /\ dispEpoch = [e \in Effs |-> 0]
    /\ firstDispatch = [e \in Effs |-> -1] /\ sendDeadline = [e \in Effs |-> -1]
    /\ journal = <<>>
    /\ grantRevoked = [g \in Grants |-> FALSE] /\ revokeReturned = [g \in Grants |-> {}]
    /\ handRefund = 0 /\ cancelReq = FALSE /\ offer = Payload0 /\ localOk = TRUE
    /\ up = [w \in Workers |-> TRUE] /\ ws = [w \in Workers |-> IdleW]
    /\ wire = {} /\ ledger = [e \in Effs |-> 0] /\ keys = {} /\ keysPruned = FALSE
    /\ sends = 0 /\ effSends = [e \in Effs |-> 0] /\ sendBad = NoBad
    /\ lastSendDL = [e \in Effs |-> -1]
    /\ lateResults = 0 /\ lateAcks = 0 /\ crashes = 0 /\ ghost = GhostFlags
    /\ tAttempt = 0 /\ tStart = -1 /\ tHolder = Nobody /\ tKey = 1

-----------------------------------------------------------------------------
Max(a, b) == IF a > b THEN a ELSE b
Entry(e, k, v) == [eff |-> e, kind |-> k, via |-> v]
Count(e, k) == Len(SelectSeq(journal, LAMBDA x : x.eff = e /\ x.kind = k))
HasEntry(k, v) == \E i \in DOMAIN journal : journal[i].kind = k /\ journal[i].via = v
At(w, p) == up[w] /\ ws[w].pc = p
Go(w, p) == ws' = [ws EXCEPT ![w].pc = p]
Idle(w) == ws' = [ws EXCEPT ![w] = IdleW]
Cur(w) == ws[w].eff
(* Past effect e: the next effect, or the return. *)
GoNext(w, e) == ws' = [ws EXCEPT ![w].pc = NextPc(e), ![w].eff = NextEff(e)]

(***************************************************************************)
(* The eager fence (docs/design.md#fence): the current epoch, running,     *)
(* lease not expired.  It is the first statement of every worker write;    *)
(* zero rows abandons the run.  NoFencing lets writes through regardless;  *)
(* FenceWithoutEpoch matches any live running row (the epoch condition     *)
(* dropped), so a zombie's write passes on its successor's lease and       *)
(* extends it.  A write that commits without the fence is what             *)
(* FencedWrites forbids.                                                   *)
(***************************************************************************)
Fence(w) == ws[w].epoch = wfEpoch /\ wfStatus = "running" /\ leaseExp > now
FenceNoEpoch == wfStatus = "running" /\ leaseExp > now
FenceOk(w) == \/ Fence(w) \/ Broken("no_fencing")
              \/ (Broken("fence_without_epoch") /\ FenceNoEpoch)
Unfenced(w) == [ghost EXCEPT !.unfenced = @ \/ ~Fence(w)]
(* A write whose fence UPDATE matched renews the lease; the worker re-arms its local deadline
   from t0 <= now. *)
NewLease(w) == IF Fence(w) \/ (Broken("fence_without_epoch") /\ FenceNoEpoch)
               THEN now + LeaseTTL ELSE leaseExp

(* An open T_dispatch holds the workflow row (fence UPDATE), the effect row FOR UPDATE and the
   grant FOR SHARE until it commits: other writers of those rows wait. *)
TxnOpen(w) == At(w, "dcommit")
RowFree(w) == \A v \in Workers \ {w} : ~TxnOpen(v)
NoTxn == \A v \in Workers : ~TxnOpen(v)

(* The effective tier at recovery (docs/design.md#gated-effects): past DedupAge tier 1 becomes
   2 or 3. *)
PastWindow(e) == firstDispatch[e] >= 0 /\ now - firstDispatch[e] > DedupAge
EffTierNow(e) == IF Tier = 1 /\ PastWindow(e) THEN (IF Queryable THEN 2 ELSE 3) ELSE Tier
GrantCovers(e, p) == ~grantRevoked[GrantOf(e)] /\ p = Payload0
PremiseNow == handRefund = 0     \* decided_on: refunded_by_others = 0
(* The payload bound at the first PROPOSED (Temporal: the approved amount). *)
FirstBoundPayload(e) == IF Interlock THEN boundPayload[e] ELSE Payload0

-----------------------------------------------------------------------------
(***************************************************************************)
(* Claims (docs/design.md#claims), FOR UPDATE SKIP LOCKED.  t0 is read     *)
(* before the claim, so the local deadline t0 + LeaseTTL is never after    *)
(* the lease.  EarlyTakeover drops the lease condition of a takeover.      *)
(***************************************************************************)
Claim(w) ==
    /\ Interlock /\ At(w, "idle") /\ RowFree(w)
    /\ \/ wfStatus = "pending"
       \/ wfStatus = "running" /\ (leaseExp <= now \/ Broken("early_takeover"))
    /\ wfEpoch' = wfEpoch + 1 /\ wfStatus' = "running" /\ leaseExp' = now + LeaseTTL
    /\ ghost' = [ghost EXCEPT !.tookOver = @ \/ wfStatus = "running",
                              !.takeoverAfterJump = @ \/ (wfStatus = "running" /\ ghost.jumped),
                              !.earlyTakeover = @ \/ (wfStatus = "running" /\ leaseExp > now)]
    /\ ws' = [ws EXCEPT ![w].pc = "load", ![w].epoch = wfEpoch + 1,
                        ![w].deadline = now + LocalTTL]
    /\ UNCHANGED <<now, stepVars, effVars, worldVars, up, targetVars, sends, effSends, sendBad,
                   lastSendDL, lateResults, lateAcks, crashes, temporalVars>>

(***************************************************************************)
(* The heartbeat (queries.sql `heartbeat`): one UPDATE fenced by epoch,    *)
(* running and a live lease renews the lease; the worker re-arms its local *)
(* deadline from the t0 it read before the statement.  A renewal that      *)
(* matches no row marks the run fenced: the next step stops (deadline      *)
(* pulled to now).  The UPDATE waits for any open T_dispatch on the row.   *)
(* A world action, not a protocol step: it may happen at any time or       *)
(* never, so no property rests on it (and URGENT time does not wait).     *)
(***************************************************************************)
Heartbeat(w) ==
    /\ Interlock /\ up[w] /\ ws[w].pc # "idle" /\ NoTxn
    /\ IF Fence(w)
       THEN /\ leaseExp # now + LeaseTTL
            /\ leaseExp' = now + LeaseTTL
            /\ ws' = [ws EXCEPT ![w].deadline = now + LocalTTL]
            /\ ghost' = [ghost EXCEPT !.renewed = TRUE]
       ELSE /\ ws[w].deadline > now
            /\ ws' = [ws EXCEPT ![w].deadline = now]
            /\ UNCHANGED <<leaseExp, ghost>>
    /\ UNCHANGED <<now, wfStatus, wfEpoch, stepVars, effVars, worldVars, up, targetVars, sends,
                   effSends, sendBad, lastSendDL, lateResults, lateAcks, crashes, temporalVars>>

(***************************************************************************)
(* Load: one query reads the step rows.  Nothing is fenced between the    *)
(* claim and the first body, so this snapshot can be stale when the body   *)
(* starts: a stalled load can outlive the lease (docs/design.md#model-findings, *)
(* finding C1).  Replay goes to the first step without a row.             *)
(***************************************************************************)
Load(w) ==
    /\ At(w, "load")
    /\ LET todo == {e \in Effs : ~stepRow[StepOf(e)]}
           first == IF todo = {} THEN NEffects ELSE CHOOSE e \in todo : \A f \in todo : e <= f
       IN ws' = [ws EXCEPT ![w].snap = stepRow["plain"], ![w].eff = first,
                           ![w].pc = IF ~stepRow["plain"] THEN "run"
                                     ELSE IF todo # {} THEN "effect" ELSE "finish"]
    /\ UNCHANGED <<now, wfVars, stepVars, effVars, worldVars, up, targetVars, histVars,
                   temporalVars>>

(***************************************************************************)
(* The local lease check: before every step body (and model call) the     *)
(* worker compares its monotonic clock with t0 + lease_ttl and abandons    *)
(* the run past it.  A5 makes the two clocks tick together here.          *)
(***************************************************************************)
LocalLeaseOk(w) == now < ws[w].deadline \/ Broken("no_local_lease_check")

StartPlain(w) ==
    /\ At(w, "run") /\ LocalLeaseOk(w)
    /\ plainRerun' = plainRerun + (IF stepRow["plain"] THEN 1 ELSE 0)
    /\ Go(w, "plain")
    /\ UNCHANGED <<now, wfVars, stepRow, rowWrites, effVars, worldVars, up, targetVars,
                   histVars, temporalVars>>

LocalExpire(w) ==
    /\ Interlock /\ up[w] /\ ws[w].pc \in {"run", "effect", "recover"}
    /\ now >= ws[w].deadline /\ ~Broken("no_local_lease_check")
    /\ Idle(w)
    /\ UNCHANGED <<now, wfVars, stepVars, effVars, worldVars, up, targetVars, histVars,
                   temporalVars>>

(* The step record: fenced; the primary key refuses a second row. *)
RecordPlain(w) ==
    /\ At(w, "plain") /\ RowFree(w)
    /\ IF FenceOk(w) /\ ~stepRow["plain"]
       THEN /\ stepRow' = [stepRow EXCEPT !["plain"] = TRUE]
            /\ rowWrites' = [rowWrites EXCEPT !["plain"] = @ + 1]
            /\ leaseExp' = NewLease(w) /\ ghost' = Unfenced(w)
            /\ ws' = [ws EXCEPT ![w].pc = "effect", ![w].eff = 1, ![w].deadline = now + LocalTTL]
       ELSE Idle(w) /\ UNCHANGED <<stepRow, rowWrites, leaseExp, ghost>>
    /\ UNCHANGED <<now, wfStatus, wfEpoch, plainRerun, effVars, worldVars, up, targetVars,
                   sends, effSends, sendBad, lastSendDL, lateResults, lateAcks, crashes,
                   temporalVars>>

-----------------------------------------------------------------------------
(***************************************************************************)
(* The effect call (docs/design.md#gated-effects) for effect Cur(w).      *)
(* Dispatched by another pair: recovery.  Otherwise the submit path reads  *)
(* the external premises outside any transaction, then starts the          *)
(* stopwatch t0 BEFORE T_dispatch begins, so t0 precedes the transaction's *)
(* now() and the local budget ends no later than the durable send_deadline.*)
(***************************************************************************)
ReadPremises(w) ==
    /\ At(w, "effect") /\ LocalLeaseOk(w)
    /\ LET e == Cur(w) IN
       IF effState[e] = "dispatched" /\ dispEpoch[e] # ws[w].epoch
       THEN Go(w, "recover")
       ELSE ws' = [ws EXCEPT ![w].readOk = PremiseNow, ![w].grantRead = GrantCovers(e, offer),
                             ![w].sendBy = now + SendTimeout, ![w].pc = "dbegin"]
    /\ UNCHANGED <<now, wfVars, stepVars, effVars, worldVars, up, targetVars, histVars,
                   temporalVars>>

(* T_dispatch begins: the fence UPDATE locks the row; now() is fixed for the transaction. *)
DispatchBegin(w) ==
    /\ At(w, "dbegin") /\ RowFree(w)
    /\ IF FenceOk(w)
       THEN /\ ws' = [ws EXCEPT ![w].txnNow = now, ![w].fenced = Fence(w), ![w].pc = "dcommit",
                                ![w].deadline = now + LocalTTL]
            /\ leaseExp' = NewLease(w)
       ELSE Idle(w) /\ UNCHANGED leaseExp
    /\ UNCHANGED <<now, wfStatus, wfEpoch, stepVars, effVars, worldVars, up, targetVars,
                   histVars, temporalVars>>

(***************************************************************************)
(* T_dispatch commits (docs/design.md#submit, steps 1 to 13).  What it     *)
(* read is locked until here, so its checks stand at the commit.  The     *)
(* local SQL premise (localOk: a registered function over the             *)
(* application's rows) runs inside the transaction; it is read here, at    *)
(* the commit, so a change committing between the function's statement     *)
(* and the commit (READ COMMITTED, no row lock) is not modeled.           *)
(* GrantCheckOutsideTxn uses the grant as read before the transaction,    *)
(* and does not hold it FOR SHARE (so Revoke does not wait).              *)
(***************************************************************************)
RefusalEntries(e, why) ==
    IF why = "stale_premise"
    THEN <<Entry(e, "PROPOSED", ""), Entry(e, "AUTHORIZED", ""), Entry(e, "REFUSED", why)>>
    ELSE <<Entry(e, "PROPOSED", ""), Entry(e, "REFUSED", why)>>

RecordEffectStep(e) == /\ stepRow' = [stepRow EXCEPT ![StepOf(e)] = TRUE]
                       /\ rowWrites' = [rowWrites EXCEPT ![StepOf(e)] = @ + 1]

DispatchCommit(w) ==
    LET e == Cur(w)
        tn == ws[w].txnNow
        pay == IF boundPayload[e] = 0 THEN offer ELSE boundPayload[e]
        grantOk == IF Broken("grant_check_outside_txn") THEN ws[w].grantRead
                   ELSE GrantCovers(e, offer)
        why == CASE boundPayload[e] # 0 /\ boundPayload[e] # offer -> "conflicting_payload"
                 [] cancelReq -> "cancelled"
                 [] ~grantOk -> "authority"
                 [] ~ws[w].readOk \/ ~localOk -> "stale_premise"
                 [] OTHER -> ""
    IN
    /\ At(w, "dcommit")
    /\ ghost' = [ghost EXCEPT !.unfenced = @ \/ ~ws[w].fenced]
    /\ CASE stepRow[StepOf(e)] ->                 \* a zombie recorded the step: key violation
              Idle(w) /\ UNCHANGED <<effVars, stepRow, rowWrites>>
         [] effState[e] = "dispatched" ->         \* open dispatch by another pair: recover
              Go(w, "recover") /\ UNCHANGED <<effVars, stepRow, rowWrites>>
         [] effState[e] \in {"committed", "ambiguous"} ->   \* DUPLICATE_IGNORED / AMBIGUOUS
              GoNext(w, e) /\ RecordEffectStep(e) /\ UNCHANGED effVars
         [] why # "" ->                           \* REFUSED: the step row in this transaction
              /\ journal' = journal \o RefusalEntries(e, why)
              /\ effState' = [effState EXCEPT ![e] = "proposed"]
              /\ boundPayload' = [boundPayload EXCEPT ![e] = pay]
              /\ RecordEffectStep(e) /\ GoNext(w, e)
              /\ UNCHANGED <<dispEpoch, firstDispatch, sendDeadline>>
         [] OTHER ->                              \* DISPATCHED with a durable send_deadline
              /\ journal' = journal \o <<Entry(e, "PROPOSED", ""), Entry(e, "AUTHORIZED", ""),
                                         Entry(e, "DISPATCHED", "")>>
              /\ effState' = [effState EXCEPT ![e] = "dispatched"]
              /\ boundPayload' = [boundPayload EXCEPT ![e] = pay]
              /\ dispEpoch' = [dispEpoch EXCEPT ![e] = ws[w].epoch]
              /\ firstDispatch' = [firstDispatch EXCEPT ![e] = IF @ < 0 THEN tn ELSE @]
              /\ sendDeadline' = [sendDeadline EXCEPT ![e] = tn + SendTimeout]
              /\ ws' = [ws EXCEPT ![w].pc = "send", ![w].via = "send",
                    ![w].meta = [liveClaim |-> ws[w].fenced, grantOk |-> GrantCovers(e, pay),
                                 premiseOk |-> ws[w].readOk /\ localOk, payload |-> pay,
                                 recheckOk |-> TRUE, afterCancel |-> cancelReq,
                                 pastWindow |-> FALSE, deadline |-> tn + SendTimeout,
                                 key |-> e, recovery |-> FALSE, eff |-> e],
                    \* StopwatchAfterDispatch: t0 taken only now, after the commit
                    ![w].sendBy = IF Broken("stopwatch_after_dispatch") THEN now + SendTimeout
                                  ELSE ws[w].sendBy]
              /\ UNCHANGED <<stepRow, rowWrites>>
    /\ UNCHANGED <<now, wfVars, plainRerun, worldVars, up, targetVars, sends, effSends, sendBad,
                   lastSendDL, lateResults, lateAcks, crashes, temporalVars>>

(***************************************************************************)
(* The send under the watchdog (docs/design.md#send-deadline): bytes leave *)
(* only while the local budget lasts; past it the watchdog ends the        *)
(* process, so nothing leaves late while the process runs (A1).  With      *)
(* PAUSE a process frozen across its deadline sends when it thaws.         *)
(* A send after cancel is a violation unless it is a recovery resend       *)
(* (T_resolve finishes a dispatch that T_dispatch authorized before the    *)
(* cancel: NoSendAfterCancel is about authorizations, docs/design.md#submit).*)
(***************************************************************************)
SendBytes(w, m) ==
    LET e == m.eff
        g == GrantOf(e)
    IN
    /\ wire' = wire \cup {[id |-> sends + 1, key |-> m.key, by |-> w, eff |-> e,
                           processBy |-> Max(m.deadline, now) + SettleMargin - MaxSkew]}
    /\ sends' = sends + 1
    /\ effSends' = [effSends EXCEPT ![e] = @ + 1]
    /\ sendBad' = [sendBad EXCEPT
          !.liveClaim = @ \/ ~m.liveClaim,
          !.grantOk = @ \/ ~m.grantOk,
          !.premiseOk = @ \/ ~m.premiseOk,
          !.recheck = @ \/ (effSends[e] > 0 /\ ~m.recheckOk),
          !.payload = @ \/ m.payload # FirstBoundPayload(e),
          !.cancel = @ \/ (m.afterCancel /\ ~m.recovery),
          !.revoke = @ \/ (grantRevoked[g] /\ e \notin revokeReturned[g]),
          !.premiseAtSend = @ \/ ~PremiseNow,
          !.overlap = @ \/ ~(lastSendDL[e] < 0 \/ now > lastSendDL[e] + SettleMargin),
          !.tier3 = @ \/ (effSends[e] > 0
                          /\ (Tier = 3 \/ (Tier = 1 /\ ~Queryable /\ m.pastWindow)))]
    /\ lastSendDL' = [lastSendDL EXCEPT ![e] = m.deadline]
    /\ ghost' = [ghost EXCEPT !.recoverySent = @ \/ m.recovery,
                              !.recoverySendAfterJump = @ \/ (m.recovery /\ ghost.jumped)]

Send(w) ==
    /\ Interlock /\ At(w, "send")
    /\ now < ws[w].sendBy \/ PAUSE
    /\ SendBytes(w, ws[w].meta)
    /\ ws' = [ws EXCEPT ![w].pc = "await", ![w].awaitId = sends + 1]
    /\ UNCHANGED <<now, wfVars, stepVars, effVars, worldVars, up, ledger, keys, keysPruned,
                   lateResults, lateAcks, crashes, temporalVars>>

(* The watchdog fires before the send, or the socket times out: the run is abandoned and
   the effect stays dispatched until recovery, after send_deadline + settle_margin. *)
SendExpire(w) ==
    /\ Interlock /\ up[w] /\ ws[w].pc \in {"send", "await"} /\ now >= ws[w].sendBy
    /\ ws[w].pc = "send" => ~PAUSE
    /\ Idle(w)
    /\ UNCHANGED <<now, wfVars, stepVars, effVars, worldVars, up, targetVars, histVars,
                   temporalVars>>

(***************************************************************************)
(* The target.  Tier 1 dedupes by key while the key is stored (Stripe    *)
(* semantics); tiers 2 and 3 apply every request.  The response reaches  *)
(* the sender only if it still waits on that connection.  A2: Tick may    *)
(* not pass a request's processBy unless SERVER_SLOW.  An application     *)
(* after the revoke of its effect's grant must be of an effect that       *)
(* rt.revoke returned (RevokeLinearizable: the list is every effect that  *)
(* may still land).                                                       *)
(***************************************************************************)
Process(r) ==
    LET applies == ~(Tier = 1 /\ r.key \in keys)
        g == GrantOf(r.eff)
    IN
    /\ r \in wire
    /\ wire' = wire \ {r}
    /\ ledger' = [ledger EXCEPT ![r.eff] = IF applies THEN @ + 1 ELSE @]
    /\ keys' = IF Tier = 1 THEN keys \cup {r.key} ELSE keys
    /\ ghost' = [ghost EXCEPT !.revokeMissed =
                    @ \/ (applies /\ grantRevoked[g] /\ r.eff \notin revokeReturned[g])]
    /\ IF up[r.by] /\ ws[r.by].awaitId = r.id /\ ws[r.by].pc \in {"await", "tawait"}
       THEN Go(r.by, IF ws[r.by].pc = "await" THEN "tcommit" ELSE "tdone")
       ELSE UNCHANGED ws
    /\ UNCHANGED <<now, wfVars, stepVars, effVars, worldVars, up, keysPruned, sends, effSends,
                   sendBad, lastSendDL, lateResults, lateAcks, crashes, temporalVars>>

(***************************************************************************)
(* T_commit: COMMITTED and the step row in one fenced transaction, if the  *)
(* effect is still dispatched by this pair.  Otherwise the unfenced       *)
(* late-result transaction (locking the effect row only) runs instead:    *)
(* compare-and-set on the dispatch pair, else LATE_RESULT.                 *)
(* CommitWithoutCheckpoint splits T_commit in two.  UnfencedCommit runs    *)
(* T_commit with neither the fence nor the pair check (it trusts the fence *)
(* it skipped for ownership), so a stale worker commits whatever happened  *)
(* to the effect meanwhile.                                                *)
(***************************************************************************)
Mine(w, e) == FenceOk(w) /\ effState[e] = "dispatched" /\ dispEpoch[e] = ws[w].epoch
CommitGuard(w, e) == Mine(w, e) \/ Broken("unfenced_commit")

TCommit(w) ==
    LET e == Cur(w) IN
    /\ At(w, "tcommit") /\ RowFree(w)
    /\ CommitGuard(w, e)
    /\ journal' = Append(journal, Entry(e, "COMMITTED", ws[w].via))
    /\ effState' = [effState EXCEPT ![e] = "committed"]
    /\ IF Broken("commit_without_checkpoint")
       THEN UNCHANGED <<stepRow, rowWrites>>
       ELSE RecordEffectStep(e)
    /\ leaseExp' = NewLease(w) /\ ghost' = Unfenced(w)
    /\ ws' = [ws EXCEPT ![w].pc = IF Broken("commit_without_checkpoint") THEN "ckpt"
                                  ELSE NextPc(e),
                        ![w].eff = IF Broken("commit_without_checkpoint") THEN e ELSE NextEff(e),
                        ![w].deadline = IF FenceOk(w) THEN now + LocalTTL ELSE @]
    /\ UNCHANGED <<now, wfStatus, wfEpoch, plainRerun, boundPayload, dispEpoch, firstDispatch,
                   sendDeadline, worldVars, up, targetVars, sends, effSends, sendBad, lastSendDL,
                   lateResults, lateAcks, crashes, temporalVars>>

Checkpoint(w) ==
    LET e == Cur(w) IN
    /\ At(w, "ckpt") /\ RowFree(w)
    /\ IF FenceOk(w) /\ ~stepRow[StepOf(e)]
       THEN /\ RecordEffectStep(e) /\ leaseExp' = NewLease(w) /\ ghost' = Unfenced(w)
            /\ ws' = [ws EXCEPT ![w].pc = NextPc(e), ![w].eff = NextEff(e),
                                ![w].deadline = now + LocalTTL]
       ELSE Idle(w) /\ UNCHANGED <<stepRow, rowWrites, leaseExp, ghost>>
    /\ UNCHANGED <<now, wfStatus, wfEpoch, plainRerun, effVars, worldVars, up, targetVars,
                   sends, effSends, sendBad, lastSendDL, lateResults, lateAcks, crashes,
                   temporalVars>>

LateResult(w) ==
    LET e == Cur(w) IN
    /\ At(w, "tcommit") /\ RowFree(w)
    /\ ~CommitGuard(w, e)
    /\ IF effState[e] = "dispatched" /\ dispEpoch[e] = ws[w].epoch
       THEN \* compare-and-set: COMMITTED with no step row; the successor replays it
            /\ journal' = Append(journal, Entry(e, "COMMITTED", "late-cas"))
            /\ effState' = [effState EXCEPT ![e] = "committed"]
            /\ UNCHANGED <<lateResults, lateAcks>>
       ELSE /\ lateAcks' = lateAcks + 1
            /\ IF Broken("late_ack_dropped")
               THEN UNCHANGED <<journal, lateResults>>
               ELSE /\ journal' = Append(journal, Entry(e, "LATE_RESULT", ""))
                    /\ lateResults' = lateResults + 1
            /\ UNCHANGED effState
    /\ Idle(w)
    /\ UNCHANGED <<now, wfVars, stepVars, boundPayload, dispEpoch, firstDispatch, sendDeadline,
                   worldVars, up, targetVars, sends, effSends, sendBad, lastSendDL, crashes,
                   ghost, temporalVars>>

-----------------------------------------------------------------------------
(***************************************************************************)
(* Recovery (docs/design.md#recovery).  Nothing queries or resends before  *)
(* now > send_deadline + settle_margin: by A2 every earlier request has    *)
(* been processed by then, so a lookup is conclusive and no two sends are *)
(* in flight together.  (a) a short read and the effective tier; (c) the   *)
(* external premise re-check outside any transaction, and a lookup where   *)
(* the tier allows one.  The resend's stopwatch starts here, before        *)
(* T_resolve.                                                              *)
(***************************************************************************)
Settled(e) == now > sendDeadline[e] + SettleMargin \/ Broken("recover_before_deadline")

RecoverRead(w) ==
    LET e == Cur(w) IN
    /\ At(w, "recover") /\ RowFree(w)
    /\ IF effState[e] # "dispatched"
       THEN Go(w, "effect")
       ELSE /\ Settled(e)
            /\ LET et == EffTierNow(e) IN
               ws' = [ws EXCEPT ![w].effTier = et, ![w].readOk = PremiseNow,
                                ![w].found = (et = 2 \/ (et = 1 /\ Queryable)) /\ ledger[e] > 0,
                                ![w].readPair = dispEpoch[e], ![w].sendBy = now + SendTimeout,
                                ![w].pc = "resolve"]
    /\ UNCHANGED <<now, wfVars, stepVars, effVars, worldVars, up, targetVars, histVars,
                   temporalVars>>

(***************************************************************************)
(* T_resolve, fenced: the effect must still be dispatched by the pair read *)
(* in (a), the deadline passed, and the effective tier the one (a) read,   *)
(* else roll back and re-enter: a tier-1 window that closed since (a)      *)
(* must not be resent into (TierAtRead keeps the tier of (a)).  The grant  *)
(* is locked FOR SHARE and re-checked with the external premises (as read  *)
(* in (c)) and the local premise (inside this transaction): "rechecked".  *)
(* NaiveRecovery skips all re-checks; NoLocalRecheck skips the local one   *)
(* (effects/recovery.py today re-checks only the target's premises).       *)
(* Then the table of docs/design.md#recovery:                             *)
(*   tier 3 -> AMBIGUOUS;  tier 1 and checks pass -> resend (same key),    *)
(*   or COMMITTED where a lookup found it;  tier 1, checks fail, no lookup *)
(*   -> AMBIGUOUS;  found -> COMMITTED;  checks fail, not found -> REFUSED *)
(*   (resolves);  else resend.  The code resends under the key once and    *)
(*   looks an effect resent before up first (a target slower than          *)
(*   SendTimeout times out every resend); the model, which keeps no count, *)
(*   lets a found tier-1 effect take either branch.                        *)
(* A resend after a cancel is recorded as such (afterCancel): it finishes  *)
(* a dispatch authorized before the cancel, and T_resolve does not refuse  *)
(* it (the code does not either; Reach_ResendAfterCancel shows it).       *)
(***************************************************************************)
Resend(w, via) ==
    LET e == Cur(w) IN
    /\ dispEpoch' = [dispEpoch EXCEPT ![e] = ws[w].epoch]
    /\ sendDeadline' = [sendDeadline EXCEPT ![e] = now + SendTimeout]
    /\ ws' = [ws EXCEPT ![w].pc = "send", ![w].via = via, ![w].deadline = now + LocalTTL,
              ![w].meta = [liveClaim |-> Fence(w), grantOk |-> GrantCovers(e, boundPayload[e]),
                           premiseOk |-> ws[w].readOk /\ localOk, payload |-> boundPayload[e],
                           recheckOk |-> ~Broken("naive_recovery"), afterCancel |-> cancelReq,
                           pastWindow |-> PastWindow(e), deadline |-> now + SendTimeout,
                           key |-> e, recovery |-> TRUE, eff |-> e]]
    /\ UNCHANGED <<journal, effState, boundPayload, firstDispatch, stepRow, rowWrites>>

Resolved(w, kind, via, st) ==
    LET e == Cur(w) IN
    /\ journal' = Append(journal, Entry(e, kind, via))
    /\ effState' = [effState EXCEPT ![e] = st]
    /\ RecordEffectStep(e)
    /\ ws' = [ws EXCEPT ![w].pc = NextPc(e), ![w].eff = NextEff(e),
                        ![w].deadline = now + LocalTTL]
    /\ UNCHANGED <<dispEpoch, sendDeadline, boundPayload, firstDispatch>>

TResolve(w) ==
    LET e == Cur(w)
        et == ws[w].effTier
        grantOk == GrantCovers(e, boundPayload[e]) \/ Broken("naive_recovery")
        premOk == (ws[w].readOk /\ (localOk \/ Broken("no_local_recheck")))
                  \/ Broken("naive_recovery")
        checksOk == grantOk /\ premOk
        why == IF ~grantOk THEN "authority_at_recovery" ELSE "stale_premise_at_recovery"
        amb == et = 3 \/ (et = 1 /\ ~checksOk /\ ~Queryable)
    IN
    /\ At(w, "resolve") /\ RowFree(w)
    /\ IF ~FenceOk(w)
       THEN Idle(w) /\ UNCHANGED <<effVars, stepRow, rowWrites, leaseExp, ghost>>
       ELSE IF \/ effState[e] # "dispatched" \/ dispEpoch[e] # ws[w].readPair \/ ~Settled(e)
               \/ (EffTierNow(e) # et /\ ~Broken("tier_at_read"))
       THEN Go(w, "effect") /\ UNCHANGED <<effVars, stepRow, rowWrites, leaseExp, ghost>>
       ELSE /\ leaseExp' = NewLease(w)
            /\ CASE et = 3 -> Resolved(w, "AMBIGUOUS", "tier3", "ambiguous")
                 [] et = 1 /\ checksOk ->
                       \/ Resend(w, "retry-idempotent")
                       \/ ws[w].found /\ Resolved(w, "COMMITTED", "recovery-query", "committed")
                 [] et = 1 /\ ~Queryable -> Resolved(w, "AMBIGUOUS", why, "ambiguous")
                 [] ws[w].found -> Resolved(w, "COMMITTED", "recovery-query", "committed")
                 [] ~checksOk -> Resolved(w, "REFUSED", why, "proposed")
                 [] OTHER -> Resend(w, "recovery-reapply")
            \* a resend is the branch that goes on to send (after the CASE, which chose it)
            /\ ghost' = [ghost EXCEPT !.unfenced = @ \/ ~Fence(w),
                                      !.ambTier[e] = IF amb THEN et ELSE @,
                                      !.lastRecheckFailed[e] = IF amb THEN ~checksOk ELSE @,
                                      !.resendAfterCancel = @ \/ (ws'[w].pc = "send" /\ cancelReq)]
    /\ UNCHANGED <<now, wfStatus, wfEpoch, plainRerun, worldVars, up, targetVars, sends,
                   effSends, sendBad, lastSendDL, lateResults, lateAcks, crashes, temporalVars>>

(* The workflow returns: a fenced write of the terminal status. *)
Complete(w) ==
    /\ Interlock /\ At(w, "finish") /\ RowFree(w)
    /\ IF FenceOk(w)
       THEN /\ wfStatus' = IF cancelReq THEN "cancelled" ELSE "completed"
            /\ ghost' = Unfenced(w)
       ELSE UNCHANGED <<wfStatus, ghost>>
    /\ Idle(w)
    /\ UNCHANGED <<now, wfEpoch, leaseExp, stepVars, effVars, worldVars, up, targetVars,
                   sends, effSends, sendBad, lastSendDL, lateResults, lateAcks, crashes,
                   temporalVars>>

-----------------------------------------------------------------------------
(***************************************************************************)
(* Temporal baselines (one activity: effect 1).  The server schedules      *)
(* attempts of the refund activity with a start-to-close timeout of        *)
(* SendTimeout and retries at once.  The key is stable per workflow run; a *)
(* reset starts a new run (new key, new decision).  There is no claim,     *)
(* fence or effect journal, and a running attempt never hears of a cancel  *)
(* (no heartbeat).  temporal_precheck first reads grant, eligibility, the  *)
(* local premise and the approved amount, in steps separate from the send. *)
(***************************************************************************)
TPlain(w) ==
    /\ Temporal /\ At(w, "idle") /\ wfStatus = "pending"
    /\ stepRow' = [stepRow EXCEPT !["plain"] = TRUE]
    /\ rowWrites' = [rowWrites EXCEPT !["plain"] = @ + 1]
    /\ wfStatus' = "running"
    /\ UNCHANGED <<now, wfEpoch, leaseExp, plainRerun, effVars, worldVars, up, ws, targetVars,
                   histVars, temporalVars>>

TPick(w) ==
    /\ Temporal /\ At(w, "idle") /\ wfStatus = "running"
    /\ ~stepRow["effect"] /\ ~cancelReq /\ tHolder = Nobody /\ tAttempt < MaxAttempts
    /\ tAttempt' = tAttempt + 1 /\ tStart' = now /\ tHolder' = w
    /\ ws' = [ws EXCEPT ![w].attempt = tAttempt + 1, ![w].readOk = PremiseNow /\ localOk,
                        ![w].sendBy = now + SendTimeout,
                        ![w].meta = [NoMeta EXCEPT !.payload = offer, !.key = tKey,
                                                   !.deadline = now + SendTimeout],
                        ![w].pc = IF MODE = "temporal_precheck" THEN "tread" ELSE "tsend"]
    /\ UNCHANGED <<now, wfVars, stepVars, effVars, worldVars, up, targetVars, histVars, tKey>>

Current(w) == tHolder = w /\ ws[w].attempt = tAttempt

(* precheck: grant live, payment still has room (a hand refund, above all a partial one, passes
   this), the local premise, amount as approved.  A failed check is non-retryable: the activity
   fails and the workflow ends. *)
TRead(w) ==
    /\ At(w, "tread")
    /\ LET p == ws[w].meta.payload
           ok == /\ ~grantRevoked[GrantOf(1)] /\ p = Payload0 /\ localOk
                 /\ 100 - handRefund - 20 * ledger[1] >= p
       IN IF ok
          THEN Go(w, "tsend") /\ UNCHANGED <<stepRow, rowWrites, journal, tHolder>>
          ELSE /\ IF Current(w) /\ ~stepRow["effect"]
                  THEN /\ RecordEffectStep(1) /\ tHolder' = Nobody
                       /\ journal' = Append(journal, Entry(1, "REFUSED", "authority"))
                  ELSE UNCHANGED <<stepRow, rowWrites, tHolder, journal>>
               /\ Idle(w)
    /\ UNCHANGED <<now, wfVars, plainRerun, effState, boundPayload, dispEpoch, firstDispatch,
                   sendDeadline, worldVars, up, targetVars, histVars, tAttempt, tStart, tKey>>

TSend(w) ==
    /\ At(w, "tsend")
    /\ LET m == ws[w].meta IN
       SendBytes(w, [m EXCEPT !.grantOk = GrantCovers(1, m.payload),
                              !.premiseOk = IF MODE = "temporal_precheck" THEN ws[w].readOk
                                            ELSE PremiseNow /\ localOk,
                              !.afterCancel = cancelReq, !.pastWindow = PastWindow(1),
                              !.eff = 1])
    /\ firstDispatch' = [firstDispatch EXCEPT ![1] = IF @ < 0 THEN now ELSE @]
    /\ ws' = [ws EXCEPT ![w].pc = "tawait", ![w].awaitId = sends + 1]
    /\ UNCHANGED <<now, wfVars, stepVars, effState, boundPayload, dispEpoch, sendDeadline,
                   journal, worldVars, up, ledger, keys, keysPruned, lateResults, lateAcks,
                   crashes, temporalVars>>

(* The server accepts a completion only from the current attempt. *)
TComplete(w) ==
    /\ At(w, "tdone")
    /\ IF Current(w) /\ ~stepRow["effect"]
       THEN /\ RecordEffectStep(1) /\ effState' = [effState EXCEPT ![1] = "committed"]
            /\ tHolder' = Nobody
       ELSE UNCHANGED <<stepRow, rowWrites, effState, tHolder>>
    /\ Idle(w)
    /\ UNCHANGED <<now, wfVars, plainRerun, boundPayload, dispEpoch, firstDispatch,
                   sendDeadline, journal, worldVars, up, targetVars, histVars, tAttempt,
                   tStart, tKey>>

(* The server times the attempt out while its worker may still send; a retry is due. *)
TTimeout ==
    /\ Temporal /\ tHolder # Nobody /\ now >= tStart + SendTimeout
    /\ tHolder' = Nobody
    /\ UNCHANGED <<now, wfVars, stepVars, effVars, worldVars, up, ws, targetVars, histVars,
                   tAttempt, tStart, tKey>>

(* The worker's HTTP client gives up waiting. *)
TGiveUp(w) ==
    /\ Temporal /\ At(w, "tawait") /\ now >= ws[w].sendBy
    /\ Idle(w)
    /\ UNCHANGED <<now, wfVars, stepVars, effVars, worldVars, up, targetVars, histVars,
                   temporalVars>>

TFinish ==
    /\ Temporal /\ wfStatus = "running"
    /\ stepRow["effect"] \/ (cancelReq /\ tHolder = Nobody)
    /\ wfStatus' = IF cancelReq THEN "cancelled" ELSE "completed"
    /\ UNCHANGED <<now, wfEpoch, leaseExp, stepVars, effVars, worldVars, up, ws, targetVars,
                   histVars, temporalVars>>

-----------------------------------------------------------------------------
(* A SIGKILL loses the process's memory and rolls back its open transaction. *)
Crash(w) ==
    /\ up[w] /\ crashes < MaxCrashes
    /\ up' = [up EXCEPT ![w] = FALSE] /\ crashes' = crashes + 1
    /\ Idle(w)
    /\ UNCHANGED <<now, wfVars, stepVars, effVars, worldVars, targetVars, sends, effSends,
                   sendBad, lastSendDL, lateResults, lateAcks, ghost, temporalVars>>

Restart(w) ==
    /\ ~up[w]
    /\ up' = [up EXCEPT ![w] = TRUE]
    /\ UNCHANGED <<now, wfVars, stepVars, effVars, worldVars, ws, targetVars, histVars,
                   temporalVars>>

-----------------------------------------------------------------------------
(***************************************************************************)
(* World events, each at most once (revoke once per grant).  rt.revoke(g)  *)
(* waits for any T_dispatch or T_resolve holding g FOR SHARE, then returns *)
(* the set of effects still dispatched under g (queries.sql                *)
(* effects_still_open_under_grant): every effect that may still land.      *)
(* RevokeListByDeadline leaves out those past their send_deadline, which   *)
(* can still land within the settle margin.  rt.cancel locks the          *)
(* workflow row.  LocalChange falsifies the local SQL premise (a row the   *)
(* premise function reads is updated by the application).                *)
(***************************************************************************)
StillOpen(g) ==
    {e \in Effs : /\ GrantOf(e) = g /\ effState[e] = "dispatched"
                  /\ (Broken("revoke_list_by_deadline") => now <= sendDeadline[e])}

Revoke(g) ==
    /\ "revoke" \in Events /\ ~grantRevoked[g]
    /\ NoTxn \/ Broken("grant_check_outside_txn")
    /\ grantRevoked' = [grantRevoked EXCEPT ![g] = TRUE]
    /\ revokeReturned' = [revokeReturned EXCEPT ![g] = IF Interlock THEN StillOpen(g) ELSE {}]
    /\ UNCHANGED <<now, wfVars, stepVars, effVars, handRefund, cancelReq, offer, localOk, up,
                   ws, targetVars, histVars, temporalVars>>

HandRefund ==
    /\ handRefund = 0
    /\ \/ "hand_refund_full" \in Events /\ handRefund' = 20
       \/ "hand_refund_partial" \in Events /\ handRefund' = 10
    /\ UNCHANGED <<now, wfVars, stepVars, effVars, grantRevoked, revokeReturned, cancelReq,
                   offer, localOk, up, ws, targetVars, histVars, temporalVars>>

Cancel ==
    /\ "cancel" \in Events /\ ~cancelReq /\ wfStatus \notin Terminal /\ NoTxn
    /\ cancelReq' = TRUE
    /\ UNCHANGED <<now, wfVars, stepVars, effVars, grantRevoked, revokeReturned, handRefund,
                   offer, localOk, up, ws, targetVars, histVars, temporalVars>>

LocalChange ==
    /\ "local_change" \in Events /\ localOk
    /\ localOk' = FALSE
    /\ UNCHANGED <<now, wfVars, stepVars, effVars, grantRevoked, revokeReturned, handRefund,
                   cancelReq, offer, up, ws, targetVars, histVars, temporalVars>>

(* The target forgets keys older than its window (EMULATED prune). Measured from the effect's
   first dispatch, which is never later than the key's creation: an over-approximation. *)
KeyEff(k) == IF Temporal THEN 1 ELSE k
(* After a backward clock jump the target, on its own clock, is ClockJump ticks further on
   than the database's: keys may be that much older than the database's times say (applied to
   every key: an over-approximation). *)
KeyAgeSlack == IF ghost.jumped /\ JumpBack THEN ClockJump ELSE 0
KeyOld(k) == firstDispatch[KeyEff(k)] >= 0
             /\ now + KeyAgeSlack - firstDispatch[KeyEff(k)] > DedupAge + DedupMargin
PruneKeys ==
    /\ "prune_keys" \in Events /\ Tier = 1 /\ ~keysPruned
    /\ \E e \in Effs : KeyOld(e)
    /\ keys' = {k \in keys : ~KeyOld(k)} /\ keysPruned' = TRUE
    /\ UNCHANGED <<now, wfVars, stepVars, effVars, worldVars, up, ws, wire, ledger, histVars,
                   temporalVars>>

(* A retry or fork re-decides and offers 30.  In Temporal this is a reset past the plain
   step: a new run with a new key re-runs the activity, while an old attempt runs on. *)
Redecide ==
    /\ "redecide" \in Events /\ offer = Payload0
    /\ Interlock => wfStatus \notin Terminal
    /\ offer' = Payload1
    /\ IF Temporal
       THEN /\ tKey' = 2 /\ tHolder' = Nobody /\ effState' = [effState EXCEPT ![1] = "none"]
            /\ stepRow' = [stepRow EXCEPT !["effect"] = FALSE]
            /\ wfStatus' = "running"
       ELSE UNCHANGED <<tKey, tHolder, effState, stepRow, wfStatus>>
    /\ UNCHANGED <<now, wfEpoch, leaseExp, rowWrites, plainRerun, boundPayload, dispEpoch,
                   firstDispatch, sendDeadline, journal, grantRevoked, revokeReturned,
                   handRefund, cancelReq, localOk, up, ws, targetVars, histVars, tAttempt,
                   tStart>>

(***************************************************************************)
(* A failover to a server whose clock differs by ClockJump (world/pg_pair  *)
(* runs one under libfaketime): between transactions, the database clock   *)
(* `now` jumps by Jump (JumpBack: backwards, as when failing back).  The   *)
(* model's times are on the database clock, so the worker's local          *)
(* deadlines and stopwatches, the target's processing bound and the ghost  *)
(* send deadlines, which live on other clocks, keep their real-time        *)
(* meaning by moving with it.  Leases, send deadlines and first dispatch   *)
(* times in the database stay as written: the new primary judges them by   *)
(* its clock.                                                              *)
(***************************************************************************)
Jump == IF JumpBack THEN -ClockJump ELSE ClockJump
Shift(t) == IF t >= 0 THEN t + Jump ELSE t

Failover ==
    /\ Interlock /\ "failover" \in Events /\ ClockJump # 0 /\ ~ghost.jumped /\ NoTxn
    /\ 0 <= now + Jump /\ now + Jump <= MaxClock
    /\ \A e \in Effs : lastSendDL[e] < 0 \/ lastSendDL[e] + Jump >= 0
    /\ now' = now + Jump
    /\ ws' = [w \in Workers |-> [ws[w] EXCEPT !.deadline = Shift(@), !.sendBy = Shift(@),
                                             !.meta.deadline = Shift(@)]]
    /\ wire' = {[r EXCEPT !.processBy = @ + Jump] : r \in wire}
    /\ lastSendDL' = [e \in Effs |-> Shift(lastSendDL[e])]
    /\ ghost' = [ghost EXCEPT !.jumped = TRUE]
    /\ UNCHANGED <<wfVars, stepVars, effVars, worldVars, up, ledger, keys, keysPruned, sends,
                   effSends, sendBad, lateResults, lateAcks, crashes, temporalVars>>

-----------------------------------------------------------------------------
(***************************************************************************)
(* Time.  The clock may not pass a request's processBy (A2) unless         *)
(* SERVER_SLOW.  With URGENT it advances only when no protocol step is    *)
(* enabled (crashes, heartbeats and world events may still happen at any  *)
(* time).                                                                 *)
(***************************************************************************)
ProtocolStep(w) ==
    \/ Claim(w) \/ Load(w) \/ StartPlain(w) \/ RecordPlain(w) \/ LocalExpire(w)
    \/ ReadPremises(w) \/ DispatchBegin(w) \/ DispatchCommit(w) \/ Send(w) \/ SendExpire(w)
    \/ TCommit(w) \/ Checkpoint(w) \/ LateResult(w) \/ RecoverRead(w) \/ TResolve(w)
    \/ Complete(w) \/ Restart(w)
    \/ TPlain(w) \/ TPick(w) \/ TRead(w) \/ TSend(w) \/ TComplete(w) \/ TGiveUp(w)

Progress ==
    \/ \E w \in Workers : ProtocolStep(w)
    \/ \E r \in wire : Process(r)
    \/ TTimeout \/ TFinish

World == \/ \E g \in Grants : Revoke(g)
         \/ HandRefund \/ Cancel \/ LocalChange \/ PruneKeys \/ Redecide \/ Failover
         \/ \E w \in Workers : Crash(w) \/ Heartbeat(w)

Tick ==
    /\ now < MaxClock
    /\ SERVER_SLOW \/ \A r \in wire : now < r.processBy
    /\ URGENT => ~ENABLED Progress
    /\ now' = now + 1
    /\ UNCHANGED <<wfVars, stepVars, effVars, worldVars, up, ws, targetVars, histVars,
                   temporalVars>>

Next == Progress \/ World \/ Tick

Spec == Init /\ [][Next]_vars
FairSpec == Spec /\ WF_vars(Progress \/ Tick)

(***************************************************************************)
(* Reductions (models/tlc.py, docs/design.md#model-checking).  Symm:    *)
(* workers are interchangeable model values (no invariant or witness      *)
(* names one), so states equal up to renaming them are one state; sound   *)
(* for the safety invariants, and not used for liveness.  View (the       *)
(* --full runs): the state with the journal replaced by what invariants   *)
(* and witnesses read of it (per effect, how many entries of each kind    *)
(* and via).  No action reads the journal, so two states with equal views *)
(* have the same futures and the same verdicts: the merge is sound.  It   *)
(* drops only the order of the entries.                                   *)
(***************************************************************************)
JournalSummary ==
    [e \in Effs |-> [kv \in {<<x.kind, x.via>> : x \in {journal[i] : i \in DOMAIN journal}}
                    |-> Len(SelectSeq(journal, LAMBDA x : x.eff = e /\ <<x.kind, x.via>> = kv))]]
View == <<now, wfVars, stepVars, effState, boundPayload, dispEpoch, firstDispatch, sendDeadline,
          JournalSummary, worldVars, up, ws, targetVars, histVars, temporalVars>>
Symm == Permutations(Workers)

-----------------------------------------------------------------------------
(***************************************************************************)
(* Invariants: identifiers exactly as in docs/design.md#invariant-catalog  *)
(* and models/catalog.yaml.  Send-history fields are fixed at the          *)
(* transaction that authorized the send, except afterRevoke, premiseAtSend *)
(* and prevSendSettled, which are read when the bytes leave.              *)
(***************************************************************************)
NoRerunAfterComplete == plainRerun = 0
StepResultUnique == \A s \in Steps : rowWrites[s] <= 1
FencedWrites == ~ghost.unfenced
(* LeaseMutex: two workers never both hold a live claim.  A worker holds one while it runs the
   workflow (pc # idle) and its local deadline, the lease as it knows it, has not passed: that
   is when it may start a step body or a model call.  An early takeover, and a zombie whose
   write a fence let through and re-armed, both make two holders. *)
LiveHolder(w) == up[w] /\ ws[w].pc # "idle" /\ now < ws[w].deadline
LeaseMutex == \A v, w \in Workers : (v # w /\ LiveHolder(v)) => ~LiveHolder(w)
TakeoverOnlyAfterExpiry == ~ghost.earlyTakeover
AtMostOneCommit == \A e \in Effs : Count(e, "COMMITTED") <= 1
EffectAtMostOnceTier12 ==
    (Tier \in {1, 2} /\ ~(Tier = 1 /\ ~Queryable /\ keysPruned)) => \A e \in Effs : ledger[e] <= 1
Tier3NeverResends == ~sendBad.tier3
NoOverlappingSends == ~sendBad.overlap
CommittedImpliesApplied == \A e \in Effs : effState[e] = "committed" => ledger[e] >= 1
AmbiguousOnlyWhenUnknowable ==
    \A e \in Effs :
        effState[e] = "ambiguous" =>
            \/ ghost.ambTier[e] = 3
            \/ ghost.ambTier[e] = 1 /\ ~Queryable /\ ghost.lastRecheckFailed[e]
(* The dispatching claim is current and its worker still runs the workflow.  The worker is
   part of it because a backward clock jump (failover) can make an expired lease row look live
   again after its holder has left: nobody then holds the run, and a successor replays the
   commit once the row expires again (Failover_t1q found this with the lease row alone). *)
CurrentDispatcherLive(e) ==
    /\ dispEpoch[e] = wfEpoch /\ wfStatus = "running" /\ leaseExp > now
    /\ \E w \in Workers : LiveHolder(w) /\ ws[w].epoch = dispEpoch[e]
EffectCheckpointAtomic ==
    \A e \in Effs :
        (Interlock /\ effState[e] = "committed" /\ ~stepRow[StepOf(e)])
            => ~CurrentDispatcherLive(e)
SendRequiresLiveClaim == ~sendBad.liveClaim
NoSendUnderRevokedGrant == ~sendBad.grantOk
(* Both halves: no send under g after the revoke unless revoke returned its effect, and no
   application at the target after the revoke of an effect revoke did not return. *)
RevokeLinearizable == ~sendBad.revoke /\ ~ghost.revokeMissed
NoSendOnStalePremise == ~sendBad.premiseOk
PremiseTrueAtSend == ~sendBad.premiseAtSend
RecoveryRechecks == ~sendBad.recheck
PayloadBound == ~sendBad.payload
NoSendAfterCancel == ~sendBad.cancel
LateResultPreserved == lateResults = lateAcks
Resolutions(e) == Count(e, "COMMITTED") + Count(e, "AMBIGUOUS")
                  + Len(SelectSeq(journal, LAMBDA x : x.eff = e /\ x.kind = "REFUSED"
                          /\ x.via \in {"authority_at_recovery", "stale_premise_at_recovery"}))
ReceiptChainLinear ==
    \A e \in Effs : Count(e, "COMMITTED") <= 1 /\ Count(e, "DISPATCHED") <= Resolutions(e) + 1

Termination == <>(wfStatus \in Terminal)
EffectResolved ==
    \A e \in Effs :
        (effState[e] = "dispatched") ~> (effState[e] \in {"committed", "ambiguous", "proposed"})

-----------------------------------------------------------------------------
(***************************************************************************)
(* Reach_* witnesses, checked as the invariant ~P: TLC's counterexample    *)
(* shows P is reachable, so a "hold" beside it is not vacuous.            *)
(***************************************************************************)
Reach_PlainRecorded == stepRow["plain"]
Reach_StaleLoad == \E w \in Workers : At(w, "run") /\ stepRow["plain"]
Reach_Takeover == ghost.tookOver
Reach_Renewed == ghost.renewed
(* After a failover moved the database clock: a takeover judged by the new clock, and a
   recovery send whose settle window was judged by it. *)
Reach_TakeoverAfterJump == ghost.takeoverAfterJump
Reach_RecoverySendAfterJump == ghost.recoverySendAfterJump
Reach_Send == sends >= 1
Reach_Resend == \E e \in Effs : effSends[e] >= 2
Reach_RecoverySend == ghost.recoverySent
Reach_Commit == \E e \in Effs : effState[e] = "committed"
Reach_LateCommit == HasEntry("COMMITTED", "late-cas")
Reach_CommitOnQuery == HasEntry("COMMITTED", "recovery-query")
Reach_Ambiguous == \E e \in Effs : effState[e] = "ambiguous"
(* A worker at T_resolve whose recovery read judged tier 1 while the window has closed since. *)
Reach_TierRoseAtResolve ==
    \E w \in Workers : At(w, "resolve") /\ ws[w].effTier = 1 /\ EffTierNow(Cur(w)) # 1
Reach_RevokeReturned == \E g \in Grants : revokeReturned[g] # {}
(* A revoke of one grant while the other grant's effect is open: the set leaves it out. *)
Reach_RevokeOtherOpen ==
    \E g \in Grants : grantRevoked[g] /\ \E e \in Effs : GrantOf(e) # g /\ sends >= 1
                                                          /\ effState[e] = "dispatched"
Reach_SecondEffectSent == TWO_EFFECTS /\ effSends[NEffects] >= 1
Reach_RefusedAuthority == HasEntry("REFUSED", "authority") \/ HasEntry("REFUSED", "authority_at_recovery")
Reach_RefusedStale == HasEntry("REFUSED", "stale_premise")
                      \/ HasEntry("REFUSED", "stale_premise_at_recovery")
Reach_RefusedLocal == ~localOk /\ Reach_RefusedStale /\ PremiseNow
Reach_RefusedConflict == HasEntry("REFUSED", "conflicting_payload")
Reach_RefusedCancelled == HasEntry("REFUSED", "cancelled")
Reach_ResendAfterCancel == ghost.resendAfterCancel
Reach_LateResult == lateAcks >= 1
Reach_Completed == wfStatus = "completed"
=============================================================================
