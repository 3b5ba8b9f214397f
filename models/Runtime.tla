------------------------------- MODULE Runtime -------------------------------
(***************************************************************************)
(* Interlock Runtime: one workflow, a plain step, then one gated effect.   *)
(* Claims and the eager fence, step rows, T_dispatch as begin + commit,    *)
(* the send under a watchdog, a target with a dedup store and a settle    *)
(* bound, T_commit, the late-result path, recovery by tier with T_resolve, *)
(* and world events (revoke, hand refund, cancel, prune, redecide).        *)
(*                                                                         *)
(* MODE "interlock" is the runtime; "temporal_idem" and                    *)
(* "temporal_precheck" are the Temporal baselines (server-scheduled        *)
(* attempts with a stable idempotency key, the second with non-atomic      *)
(* pre-send reads).  BROKEN selects one deliberately wrong variant.        *)
(*                                                                         *)
(* Model check for the stated constants, not a proof of the Python or SQL. *)
(* Assumptions (docs/design.md#assumptions): A1 no pause across the local send deadline     *)
(* (PAUSE lifts it), A2 the target finishes a request within SettleMargin  *)
(* after its send_deadline (SERVER_SLOW lifts it), A3 external premises    *)
(* are true as of their read (PremiseTrueAtSend shows the window), A4      *)
(* durable commits, A5 the database and worker clocks tick together here.  *)
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
    Events,         \* the world events that may happen, each at most once
    MaxClock, LeaseTTL, SendTimeout, SettleMargin,
    DedupAge,       \* dedup_window - DEDUP_MARGIN: the protocol's tier-1 horizon
    DedupMargin,    \* DEDUP_MARGIN: the target keeps a key for DedupAge + DedupMargin ticks
    MaxCrashes,
    MaxAttempts,    \* Temporal: attempts of the refund activity explored (unlimited in Temporal)
    URGENT          \* time advances only when no protocol step can happen (liveness)

ASSUME /\ Tier \in {1, 2, 3}
       /\ Queryable \in BOOLEAN /\ PAUSE \in BOOLEAN /\ SERVER_SLOW \in BOOLEAN
       /\ MODE \in {"interlock", "temporal_idem", "temporal_precheck"}
       /\ BROKEN \in {"none", "naive_recovery", "no_fencing", "grant_check_outside_txn",
                      "commit_without_checkpoint", "recover_before_deadline",
                      "stopwatch_after_dispatch", "late_ack_dropped", "no_local_lease_check"}
       /\ Events \subseteq {"revoke", "hand_refund_full", "hand_refund_partial", "cancel",
                            "prune_keys", "redecide"}
       /\ LeaseTTL > SendTimeout

Interlock == MODE = "interlock"
Temporal == ~Interlock
Broken(b) == BROKEN = b
Payload0 == 20          \* the decided and approved amount (rt.approve binds it to the grant)
Payload1 == 30          \* what a redecision offers
Nobody == "nobody"
Terminal == {"completed", "cancelled"}
Steps == {"plain", "effect"}

VARIABLES
    now,                                    \* the database clock
    wfStatus, wfEpoch, leaseExp,            \* ilr.workflows
    stepRow, rowWrites, plainRerun,         \* ilr.steps; ghost counters
    effState, boundPayload, dispEpoch,      \* ilr.effects (dispEpoch: the dispatch pair)
    firstDispatch, sendDeadline, journal,   \* ilr.effects clocks; the entries [kind, via]
    grantRevoked, revokeReturned,           \* ilr.grants; did rt.revoke return the effect
    handRefund, cancelReq, offer,           \* external premise; cancel; the offered payload
    up, ws,                                 \* per worker: process alive; its memory
    wire, ledger, keys, keysPruned,         \* the target: requests, applications, dedup keys
    sends, sendBad, lastSendDL,             \* ghost: sends on the wire; which send checks failed
    lateResults, lateAcks, crashes, ghost,  \* ghost counters and flags
    tAttempt, tStart, tHolder, tKey         \* Temporal server: attempts, start, holder, key

wfVars == <<wfStatus, wfEpoch, leaseExp>>
stepVars == <<stepRow, rowWrites, plainRerun>>
effVars == <<effState, boundPayload, dispEpoch, firstDispatch, sendDeadline, journal>>
worldVars == <<grantRevoked, revokeReturned, handRefund, cancelReq, offer>>
targetVars == <<wire, ledger, keys, keysPruned>>
histVars == <<sends, sendBad, lastSendDL, lateResults, lateAcks, crashes, ghost>>
temporalVars == <<tAttempt, tStart, tHolder, tKey>>
vars == <<now, wfVars, stepVars, effVars, worldVars, up, ws, targetVars, histVars,
          temporalVars>>

(***************************************************************************)
(* A worker's memory.  pc is where it is in the workflow; epoch the claim   *)
(* it believes it holds; deadline its local lease deadline t0 + LeaseTTL;  *)
(* snap the step rows it loaded; sendBy its send budget (the watchdog);    *)
(* meta what the authorizing transaction established for the next send.   *)
(***************************************************************************)
NoMeta == [liveClaim |-> FALSE, grantOk |-> FALSE, premiseOk |-> FALSE, payload |-> 0,
           recheckOk |-> FALSE, afterCancel |-> FALSE, pastWindow |-> FALSE,
           deadline |-> -1, key |-> 0, recovery |-> FALSE]
IdleW == [pc |-> "idle", epoch |-> 0, deadline |-> -1, snap |-> FALSE, readOk |-> FALSE,
          grantRead |-> FALSE, sendBy |-> -1, txnNow |-> -1, fenced |-> FALSE,
          found |-> FALSE, effTier |-> 0, readPair |-> 0, meta |-> NoMeta, via |-> "send",
          awaitId |-> 0, attempt |-> 0]
GhostFlags == [unfenced |-> FALSE, earlyTakeover |-> FALSE, tookOver |-> FALSE,
               lastRecheckFailed |-> FALSE, ambTier |-> 0, recoverySent |-> FALSE]
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
    /\ effState \in {"none", "proposed", "dispatched", "committed", "ambiguous"}
    /\ boundPayload \in {0, Payload0, Payload1} /\ offer \in {Payload0, Payload1}
    /\ dispEpoch \in Nat /\ firstDispatch \in Int /\ sendDeadline \in Int
    /\ grantRevoked \in BOOLEAN /\ revokeReturned \in BOOLEAN
    /\ handRefund \in {0, 10, 20} /\ cancelReq \in BOOLEAN
    /\ up \in [Workers -> BOOLEAN]
    /\ \A w \in Workers : ws[w].pc \in PCs /\ ws[w].epoch \in Nat /\ ws[w].snap \in BOOLEAN
    /\ ledger \in Nat /\ keysPruned \in BOOLEAN /\ keys \subseteq {1, 2}
    /\ lateResults \in Nat /\ lateAcks \in Nat /\ crashes \in 0..MaxCrashes
    /\ tKey \in {1, 2} /\ tHolder \in Workers \cup {Nobody}

-----------------------------------------------------------------------------
Init ==
    /\ now = 0
    /\ wfStatus = "pending" /\ wfEpoch = 0 /\ leaseExp = 0
    /\ stepRow = [s \in Steps |-> FALSE] /\ rowWrites = [s \in Steps |-> 0] /\ plainRerun = 0
    /\ effState = "none" /\ boundPayload = 0 /\ dispEpoch = 0
    /\ firstDispatch = -1 /\ sendDeadline = -1 /\ journal = <<>>
    /\ grantRevoked = FALSE /\ revokeReturned = FALSE
    /\ handRefund = 0 /\ cancelReq = FALSE /\ offer = Payload0
    /\ up = [w \in Workers |-> TRUE] /\ ws = [w \in Workers |-> IdleW]
    /\ wire = {} /\ ledger = 0 /\ keys = {} /\ keysPruned = FALSE
    /\ sends = 0 /\ sendBad = NoBad /\ lastSendDL = -1
    /\ lateResults = 0 /\ lateAcks = 0 /\ crashes = 0 /\ ghost = GhostFlags
    /\ tAttempt = 0 /\ tStart = -1 /\ tHolder = Nobody /\ tKey = 1

-----------------------------------------------------------------------------
Max(a, b) == IF a > b THEN a ELSE b
Entry(k, v) == [kind |-> k, via |-> v]
Count(k) == Len(SelectSeq(journal, LAMBDA e : e.kind = k))
HasEntry(k, v) == \E i \in DOMAIN journal : journal[i].kind = k /\ journal[i].via = v
At(w, p) == up[w] /\ ws[w].pc = p
Go(w, p) == ws' = [ws EXCEPT ![w].pc = p]
Idle(w) == ws' = [ws EXCEPT ![w] = IdleW]

(***************************************************************************)
(* The eager fence (docs/design.md#fence): the current epoch, running, lease not       *)
(* expired.  It is the first statement of every worker write; zero rows    *)
(* abandons the run.  NoFencing lets writes through regardless; a write    *)
(* that commits without the fence is what FencedWrites forbids.           *)
(***************************************************************************)
Fence(w) == ws[w].epoch = wfEpoch /\ wfStatus = "running" /\ leaseExp > now
FenceOk(w) == Fence(w) \/ Broken("no_fencing")
Unfenced(w) == [ghost EXCEPT !.unfenced = @ \/ ~Fence(w)]
(* A fenced write renews the lease; the worker re-arms its local deadline from t0 <= now. *)
NewLease(w) == IF Fence(w) THEN now + LeaseTTL ELSE leaseExp

(* An open T_dispatch holds the workflow row (fence UPDATE), the effect row FOR UPDATE and the
   grant FOR SHARE until it commits: other writers of those rows wait. *)
TxnOpen(w) == At(w, "dcommit")
RowFree(w) == \A v \in Workers \ {w} : ~TxnOpen(v)
NoTxn == \A v \in Workers : ~TxnOpen(v)

(* The effective tier at recovery (docs/design.md#gated-effects): past DedupAge tier 1 becomes 2 or 3. *)
PastWindow == firstDispatch >= 0 /\ now - firstDispatch > DedupAge
EffTierNow == IF Tier = 1 /\ PastWindow THEN (IF Queryable THEN 2 ELSE 3) ELSE Tier
GrantCovers(p) == ~grantRevoked /\ p = Payload0
PremiseNow == handRefund = 0     \* decided_on: refunded_by_others = 0
(* The payload bound at the first PROPOSED (Temporal: the approved amount). *)
FirstBoundPayload == IF Interlock THEN boundPayload ELSE Payload0

-----------------------------------------------------------------------------
(***************************************************************************)
(* Claims (docs/design.md#claims), FOR UPDATE SKIP LOCKED.  t0 is read before the      *)
(* claim, so the local deadline t0 + LeaseTTL is never after the lease.    *)
(***************************************************************************)
Claim(w) ==
    /\ Interlock /\ At(w, "idle") /\ RowFree(w)
    /\ wfStatus = "pending" \/ (wfStatus = "running" /\ leaseExp <= now)
    /\ wfEpoch' = wfEpoch + 1 /\ wfStatus' = "running" /\ leaseExp' = now + LeaseTTL
    /\ ghost' = [ghost EXCEPT !.tookOver = @ \/ wfStatus = "running",
                              !.earlyTakeover = @ \/ (wfStatus = "running" /\ leaseExp > now)]
    /\ ws' = [ws EXCEPT ![w].pc = "load", ![w].epoch = wfEpoch + 1,
                        ![w].deadline = now + LeaseTTL]
    /\ UNCHANGED <<now, stepVars, effVars, worldVars, up, targetVars, sends, sendBad, lastSendDL,
                   lateResults, lateAcks, crashes, temporalVars>>

(***************************************************************************)
(* Load: one query reads the step rows.  Nothing is fenced between the    *)
(* claim and the first body, so this snapshot can be stale when the body   *)
(* starts: a stalled load can outlive the lease (docs/design.md#model-findings, finding C1).  *)
(***************************************************************************)
Load(w) ==
    /\ At(w, "load")
    /\ ws' = [ws EXCEPT ![w].snap = stepRow["plain"],
                        ![w].pc = IF ~stepRow["plain"] THEN "run"
                                  ELSE IF ~stepRow["effect"] THEN "effect" ELSE "finish"]
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
            /\ ws' = [ws EXCEPT ![w].pc = "effect", ![w].deadline = now + LeaseTTL]
       ELSE Idle(w) /\ UNCHANGED <<stepRow, rowWrites, leaseExp, ghost>>
    /\ UNCHANGED <<now, wfStatus, wfEpoch, plainRerun, effVars, worldVars, up, targetVars,
                   sends, sendBad, lastSendDL, lateResults, lateAcks, crashes, temporalVars>>

-----------------------------------------------------------------------------
(***************************************************************************)
(* The effect call (docs/design.md#gated-effects).  Dispatched by another pair: recovery.     *)
(* Otherwise the submit path reads the external premises outside any     *)
(* transaction, then starts the stopwatch t0 BEFORE T_dispatch begins, so  *)
(* t0 precedes the transaction's now() and the local budget ends no later  *)
(* than the durable send_deadline.                                        *)
(***************************************************************************)
ReadPremises(w) ==
    /\ At(w, "effect") /\ LocalLeaseOk(w)
    /\ IF effState = "dispatched" /\ dispEpoch # ws[w].epoch
       THEN Go(w, "recover")
       ELSE ws' = [ws EXCEPT ![w].readOk = PremiseNow, ![w].grantRead = GrantCovers(offer),
                             ![w].sendBy = now + SendTimeout, ![w].pc = "dbegin"]
    /\ UNCHANGED <<now, wfVars, stepVars, effVars, worldVars, up, targetVars, histVars,
                   temporalVars>>

(* T_dispatch begins: the fence UPDATE locks the row; now() is fixed for the transaction. *)
DispatchBegin(w) ==
    /\ At(w, "dbegin") /\ RowFree(w)
    /\ IF FenceOk(w)
       THEN /\ ws' = [ws EXCEPT ![w].txnNow = now, ![w].fenced = Fence(w), ![w].pc = "dcommit",
                                ![w].deadline = now + LeaseTTL]
            /\ leaseExp' = NewLease(w)
       ELSE Idle(w) /\ UNCHANGED leaseExp
    /\ UNCHANGED <<now, wfStatus, wfEpoch, stepVars, effVars, worldVars, up, targetVars,
                   histVars, temporalVars>>

(***************************************************************************)
(* T_dispatch commits (docs/design.md#gated-effects (c), steps 1 to 13).  What it read is      *)
(* locked until here, so its checks stand at the commit.                   *)
(* GrantCheckOutsideTxn uses the grant as read before the transaction,    *)
(* and does not hold it FOR SHARE (so Revoke does not wait).              *)
(***************************************************************************)
RefusalEntries(why) ==
    IF why = "stale_premise"
    THEN <<Entry("PROPOSED", ""), Entry("AUTHORIZED", ""), Entry("REFUSED", why)>>
    ELSE <<Entry("PROPOSED", ""), Entry("REFUSED", why)>>

RecordEffectStep == /\ stepRow' = [stepRow EXCEPT !["effect"] = TRUE]
                    /\ rowWrites' = [rowWrites EXCEPT !["effect"] = @ + 1]

DispatchCommit(w) ==
    LET tn == ws[w].txnNow
        pay == IF boundPayload = 0 THEN offer ELSE boundPayload
        grantOk == IF Broken("grant_check_outside_txn") THEN ws[w].grantRead
                   ELSE GrantCovers(offer)
        why == CASE boundPayload # 0 /\ boundPayload # offer -> "conflicting_payload"
                 [] cancelReq -> "cancelled"
                 [] ~grantOk -> "lease"
                 [] ~ws[w].readOk -> "stale_premise"
                 [] OTHER -> ""
    IN
    /\ At(w, "dcommit")
    /\ ghost' = [ghost EXCEPT !.unfenced = @ \/ ~ws[w].fenced]
    /\ CASE stepRow["effect"] ->                  \* a zombie recorded the step: key violation
              Idle(w) /\ UNCHANGED <<effVars, stepRow, rowWrites>>
         [] effState = "dispatched" ->            \* open dispatch by another pair: recover
              Go(w, "recover") /\ UNCHANGED <<effVars, stepRow, rowWrites>>
         [] effState \in {"committed", "ambiguous"} ->   \* DUPLICATE_IGNORED / AMBIGUOUS
              Go(w, "finish") /\ RecordEffectStep /\ UNCHANGED effVars
         [] why # "" ->                           \* REFUSED: the step row in this transaction
              /\ journal' = journal \o RefusalEntries(why)
              /\ effState' = "proposed" /\ boundPayload' = pay
              /\ RecordEffectStep /\ Go(w, "finish")
              /\ UNCHANGED <<dispEpoch, firstDispatch, sendDeadline>>
         [] OTHER ->                              \* DISPATCHED with a durable send_deadline
              /\ journal' = journal \o <<Entry("PROPOSED", ""), Entry("AUTHORIZED", ""),
                                         Entry("DISPATCHED", "")>>
              /\ effState' = "dispatched" /\ boundPayload' = pay
              /\ dispEpoch' = ws[w].epoch
              /\ firstDispatch' = IF firstDispatch < 0 THEN tn ELSE firstDispatch
              /\ sendDeadline' = tn + SendTimeout
              /\ ws' = [ws EXCEPT ![w].pc = "send",
                    ![w].meta = [liveClaim |-> ws[w].fenced, grantOk |-> GrantCovers(pay),
                                 premiseOk |-> ws[w].readOk, payload |-> pay,
                                 recheckOk |-> TRUE, afterCancel |-> cancelReq,
                                 pastWindow |-> FALSE, deadline |-> tn + SendTimeout,
                                 key |-> 1, recovery |-> FALSE],
                    \* StopwatchAfterDispatch: t0 taken only now, after the commit
                    ![w].sendBy = IF Broken("stopwatch_after_dispatch") THEN now + SendTimeout
                                  ELSE ws[w].sendBy]
              /\ UNCHANGED <<stepRow, rowWrites>>
    /\ UNCHANGED <<now, wfVars, plainRerun, worldVars, up, targetVars, sends, sendBad, lastSendDL,
                   lateResults, lateAcks, crashes, temporalVars>>

(***************************************************************************)
(* The send under the watchdog (docs/design.md#send-deadline): bytes leave only while the      *)
(* local budget lasts; past it the watchdog ends the process, so nothing   *)
(* leaves late while the process runs (A1).  With PAUSE a process frozen   *)
(* across its deadline sends when it thaws.                                *)
(***************************************************************************)
SendBytes(w, m) ==
    /\ wire' = wire \cup {[id |-> sends + 1, key |-> m.key, by |-> w,
                           processBy |-> Max(m.deadline, now) + SettleMargin]}
    /\ sends' = sends + 1
    /\ sendBad' = [sendBad EXCEPT
          !.liveClaim = @ \/ ~m.liveClaim,
          !.grantOk = @ \/ ~m.grantOk,
          !.premiseOk = @ \/ ~m.premiseOk,
          !.recheck = @ \/ (sends > 0 /\ ~m.recheckOk),
          !.payload = @ \/ m.payload # FirstBoundPayload,
          !.cancel = @ \/ m.afterCancel,
          !.revoke = @ \/ (grantRevoked /\ ~revokeReturned),
          !.premiseAtSend = @ \/ ~PremiseNow,
          !.overlap = @ \/ ~(lastSendDL < 0 \/ now > lastSendDL + SettleMargin),
          !.tier3 = @ \/ (sends > 0 /\ (Tier = 3 \/ (Tier = 1 /\ ~Queryable /\ m.pastWindow)))]
    /\ lastSendDL' = m.deadline
    /\ ghost' = [ghost EXCEPT !.recoverySent = @ \/ m.recovery]

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
(* not pass a request's processBy unless SERVER_SLOW.                     *)
(***************************************************************************)
Process(r) ==
    /\ r \in wire
    /\ wire' = wire \ {r}
    /\ ledger' = IF Tier = 1 /\ r.key \in keys THEN ledger ELSE ledger + 1
    /\ keys' = IF Tier = 1 THEN keys \cup {r.key} ELSE keys
    /\ IF up[r.by] /\ ws[r.by].awaitId = r.id /\ ws[r.by].pc \in {"await", "tawait"}
       THEN Go(r.by, IF ws[r.by].pc = "await" THEN "tcommit" ELSE "tdone")
       ELSE UNCHANGED ws
    /\ UNCHANGED <<now, wfVars, stepVars, effVars, worldVars, up, keysPruned, histVars,
                   temporalVars>>

(***************************************************************************)
(* T_commit: COMMITTED and the step row in one fenced transaction.  If the *)
(* fence fails, the unfenced late-result transaction (locking the effect   *)
(* row only) runs instead: compare-and-set on the dispatch pair, else     *)
(* LATE_RESULT.  CommitWithoutCheckpoint splits T_commit in two.           *)
(***************************************************************************)
TCommit(w) ==
    /\ At(w, "tcommit") /\ RowFree(w)
    /\ FenceOk(w) /\ effState = "dispatched" /\ dispEpoch = ws[w].epoch
    /\ journal' = Append(journal, Entry("COMMITTED", ws[w].via))
    /\ effState' = "committed"
    /\ IF Broken("commit_without_checkpoint")
       THEN UNCHANGED <<stepRow, rowWrites>>
       ELSE RecordEffectStep
    /\ leaseExp' = NewLease(w) /\ ghost' = Unfenced(w)
    /\ ws' = [ws EXCEPT ![w].pc = IF Broken("commit_without_checkpoint") THEN "ckpt" ELSE "finish",
                        ![w].deadline = now + LeaseTTL]
    /\ UNCHANGED <<now, wfStatus, wfEpoch, plainRerun, boundPayload, dispEpoch, firstDispatch,
                   sendDeadline, worldVars, up, targetVars, sends, sendBad, lastSendDL, lateResults,
                   lateAcks, crashes, temporalVars>>

Checkpoint(w) ==
    /\ At(w, "ckpt") /\ RowFree(w)
    /\ IF FenceOk(w) /\ ~stepRow["effect"]
       THEN /\ RecordEffectStep /\ leaseExp' = NewLease(w) /\ ghost' = Unfenced(w)
            /\ ws' = [ws EXCEPT ![w].pc = "finish", ![w].deadline = now + LeaseTTL]
       ELSE Idle(w) /\ UNCHANGED <<stepRow, rowWrites, leaseExp, ghost>>
    /\ UNCHANGED <<now, wfStatus, wfEpoch, plainRerun, effVars, worldVars, up, targetVars,
                   sends, sendBad, lastSendDL, lateResults, lateAcks, crashes, temporalVars>>

LateResult(w) ==
    /\ At(w, "tcommit") /\ RowFree(w)
    /\ ~(FenceOk(w) /\ effState = "dispatched" /\ dispEpoch = ws[w].epoch)
    /\ IF effState = "dispatched" /\ dispEpoch = ws[w].epoch
       THEN \* compare-and-set: COMMITTED with no step row; the successor replays it
            /\ journal' = Append(journal, Entry("COMMITTED", "late-cas"))
            /\ effState' = "committed"
            /\ UNCHANGED <<lateResults, lateAcks>>
       ELSE /\ lateAcks' = lateAcks + 1
            /\ IF Broken("late_ack_dropped")
               THEN UNCHANGED <<journal, lateResults>>
               ELSE /\ journal' = Append(journal, Entry("LATE_RESULT", ""))
                    /\ lateResults' = lateResults + 1
            /\ UNCHANGED effState
    /\ Idle(w)
    /\ UNCHANGED <<now, wfVars, stepVars, boundPayload, dispEpoch, firstDispatch, sendDeadline,
                   worldVars, up, targetVars, sends, sendBad, lastSendDL, crashes, ghost,
                   temporalVars>>

-----------------------------------------------------------------------------
(***************************************************************************)
(* Recovery (docs/design.md#gated-effects).  Nothing queries or resends before      *)
(* now > send_deadline + settle_margin: by A2 every earlier request has    *)
(* been processed by then, so a lookup is conclusive and no two sends are *)
(* in flight together.  (a) a short read and the effective tier; (c) the   *)
(* premise re-check outside any transaction, and a lookup where the tier   *)
(* allows one.  The resend's stopwatch starts here, before T_resolve.      *)
(***************************************************************************)
Settled == now > sendDeadline + SettleMargin \/ Broken("recover_before_deadline")

RecoverRead(w) ==
    /\ At(w, "recover") /\ RowFree(w)
    /\ IF effState # "dispatched"
       THEN Go(w, "effect")
       ELSE /\ Settled
            /\ LET et == EffTierNow IN
               ws' = [ws EXCEPT ![w].effTier = et, ![w].readOk = PremiseNow,
                                ![w].found = (et = 2 \/ (et = 1 /\ Queryable)) /\ ledger > 0,
                                ![w].readPair = dispEpoch, ![w].sendBy = now + SendTimeout,
                                ![w].pc = "resolve"]
    /\ UNCHANGED <<now, wfVars, stepVars, effVars, worldVars, up, targetVars, histVars,
                   temporalVars>>

(***************************************************************************)
(* T_resolve, fenced: the effect must still be dispatched by the pair read *)
(* in (a) and the deadline passed, else roll back and re-enter.  The grant *)
(* is locked FOR SHARE and re-checked with the premises ("rechecked").    *)
(* NaiveRecovery skips both re-checks.  Then the spec's table:            *)
(*   tier 3 -> AMBIGUOUS;  tier 1 and checks pass -> resend (same key);    *)
(*   tier 1, checks fail, no lookup -> AMBIGUOUS;  found -> COMMITTED;     *)
(*   checks fail, not found -> REFUSED (resolves);  else resend.           *)
(***************************************************************************)
Resend(w, via) ==
    /\ dispEpoch' = ws[w].epoch
    /\ sendDeadline' = now + SendTimeout
    /\ ws' = [ws EXCEPT ![w].pc = "send", ![w].via = via, ![w].deadline = now + LeaseTTL,
              ![w].meta = [liveClaim |-> Fence(w), grantOk |-> GrantCovers(boundPayload),
                           premiseOk |-> ws[w].readOk, payload |-> boundPayload,
                           recheckOk |-> ~Broken("naive_recovery"), afterCancel |-> FALSE,
                           pastWindow |-> PastWindow, deadline |-> now + SendTimeout,
                           key |-> 1, recovery |-> TRUE]]
    /\ UNCHANGED <<journal, effState, boundPayload, firstDispatch, stepRow, rowWrites>>

Resolved(w, kind, via, st) ==
    /\ journal' = Append(journal, Entry(kind, via))
    /\ effState' = st
    /\ RecordEffectStep
    /\ ws' = [ws EXCEPT ![w].pc = "finish", ![w].deadline = now + LeaseTTL]
    /\ UNCHANGED <<dispEpoch, sendDeadline, boundPayload, firstDispatch>>

TResolve(w) ==
    LET et == ws[w].effTier
        grantOk == GrantCovers(boundPayload) \/ Broken("naive_recovery")
        premOk == ws[w].readOk \/ Broken("naive_recovery")
        checksOk == grantOk /\ premOk
        why == IF ~grantOk THEN "lease_at_recovery" ELSE "stale_premise_at_recovery"
        amb == et = 3 \/ (et = 1 /\ ~checksOk /\ ~Queryable)
    IN
    /\ At(w, "resolve") /\ RowFree(w)
    /\ IF ~FenceOk(w)
       THEN Idle(w) /\ UNCHANGED <<effVars, stepRow, rowWrites, leaseExp, ghost>>
       ELSE IF effState # "dispatched" \/ dispEpoch # ws[w].readPair \/ ~Settled
       THEN Go(w, "effect") /\ UNCHANGED <<effVars, stepRow, rowWrites, leaseExp, ghost>>
       ELSE /\ leaseExp' = NewLease(w)
            /\ ghost' = [ghost EXCEPT !.unfenced = @ \/ ~Fence(w),
                                      !.ambTier = IF amb THEN et ELSE @,
                                      !.lastRecheckFailed = IF amb THEN ~checksOk ELSE @]
            /\ CASE et = 3 -> Resolved(w, "AMBIGUOUS", "tier3", "ambiguous")
                 [] et = 1 /\ checksOk -> Resend(w, "retry-idempotent")
                 [] et = 1 /\ ~Queryable -> Resolved(w, "AMBIGUOUS", why, "ambiguous")
                 [] ws[w].found -> Resolved(w, "COMMITTED", "recovery-query", "committed")
                 [] ~checksOk -> Resolved(w, "REFUSED", why, "proposed")
                 [] OTHER -> Resend(w, "recovery-reapply")
    /\ UNCHANGED <<now, wfStatus, wfEpoch, plainRerun, worldVars, up, targetVars, sends, sendBad,
                   lastSendDL, lateResults, lateAcks, crashes, temporalVars>>

(* The workflow returns: a fenced write of the terminal status. *)
Complete(w) ==
    /\ Interlock /\ At(w, "finish") /\ RowFree(w)
    /\ IF FenceOk(w)
       THEN /\ wfStatus' = IF cancelReq THEN "cancelled" ELSE "completed"
            /\ ghost' = Unfenced(w)
       ELSE UNCHANGED <<wfStatus, ghost>>
    /\ Idle(w)
    /\ UNCHANGED <<now, wfEpoch, leaseExp, stepVars, effVars, worldVars, up, targetVars,
                   sends, sendBad, lastSendDL, lateResults, lateAcks, crashes, temporalVars>>

-----------------------------------------------------------------------------
(***************************************************************************)
(* Temporal baselines.  The server schedules attempts of the refund        *)
(* activity with a start-to-close timeout of SendTimeout and retries at    *)
(* once.  The key is stable per workflow run; a reset starts a new run     *)
(* (new key, new decision).  There is no claim, fence or effect journal,   *)
(* and a running attempt never hears of a cancel (no heartbeat).           *)
(* temporal_precheck first reads grant, eligibility and the approved      *)
(* amount, in steps separate from the send.                               *)
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
    /\ ws' = [ws EXCEPT ![w].attempt = tAttempt + 1, ![w].readOk = PremiseNow,
                        ![w].sendBy = now + SendTimeout,
                        ![w].meta = [NoMeta EXCEPT !.payload = offer, !.key = tKey,
                                                   !.deadline = now + SendTimeout],
                        ![w].pc = IF MODE = "temporal_precheck" THEN "tread" ELSE "tsend"]
    /\ UNCHANGED <<now, wfVars, stepVars, effVars, worldVars, up, targetVars, histVars, tKey>>

Current(w) == tHolder = w /\ ws[w].attempt = tAttempt

(* precheck: grant live, payment still has room (a hand refund passes this), amount as
   approved.  A failed check is non-retryable: the activity fails and the workflow ends. *)
TRead(w) ==
    /\ At(w, "tread")
    /\ LET p == ws[w].meta.payload
           ok == ~grantRevoked /\ p = Payload0 /\ 100 - handRefund - 20 * ledger >= p
       IN IF ok
          THEN Go(w, "tsend") /\ UNCHANGED <<stepRow, rowWrites, journal, tHolder>>
          ELSE /\ IF Current(w) /\ ~stepRow["effect"]
                  THEN /\ RecordEffectStep /\ tHolder' = Nobody
                       /\ journal' = Append(journal, Entry("REFUSED", "lease"))
                  ELSE UNCHANGED <<stepRow, rowWrites, tHolder, journal>>
               /\ Idle(w)
    /\ UNCHANGED <<now, wfVars, plainRerun, effState, boundPayload, dispEpoch, firstDispatch,
                   sendDeadline, worldVars, up, targetVars, histVars, tAttempt, tStart, tKey>>

TSend(w) ==
    /\ At(w, "tsend")
    /\ LET m == ws[w].meta IN
       SendBytes(w, [m EXCEPT !.grantOk = GrantCovers(m.payload),
                              !.premiseOk = IF MODE = "temporal_precheck" THEN ws[w].readOk
                                            ELSE PremiseNow,
                              !.afterCancel = cancelReq, !.pastWindow = PastWindow])
    /\ firstDispatch' = IF firstDispatch < 0 THEN now ELSE firstDispatch
    /\ ws' = [ws EXCEPT ![w].pc = "tawait", ![w].awaitId = sends + 1]
    /\ UNCHANGED <<now, wfVars, stepVars, effState, boundPayload, dispEpoch, sendDeadline,
                   journal, worldVars, up, ledger, keys, keysPruned, lateResults, lateAcks,
                   crashes, temporalVars>>

(* The server accepts a completion only from the current attempt. *)
TComplete(w) ==
    /\ At(w, "tdone")
    /\ IF Current(w) /\ ~stepRow["effect"]
       THEN /\ RecordEffectStep /\ effState' = "committed" /\ tHolder' = Nobody
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
    /\ UNCHANGED <<now, wfVars, stepVars, effVars, worldVars, targetVars, sends, sendBad, lastSendDL,
                   lateResults, lateAcks, ghost, temporalVars>>

Restart(w) ==
    /\ ~up[w]
    /\ up' = [up EXCEPT ![w] = TRUE]
    /\ UNCHANGED <<now, wfVars, stepVars, effVars, worldVars, ws, targetVars, histVars,
                   temporalVars>>

-----------------------------------------------------------------------------
(***************************************************************************)
(* World events, each at most once.  rt.revoke waits for any T_dispatch    *)
(* holding the grant FOR SHARE, then returns the effects still dispatched  *)
(* under it; rt.cancel locks the workflow row.                             *)
(***************************************************************************)
Revoke ==
    /\ "revoke" \in Events /\ ~grantRevoked
    /\ NoTxn \/ Broken("grant_check_outside_txn")
    /\ grantRevoked' = TRUE
    /\ revokeReturned' = (Interlock /\ effState = "dispatched")
    /\ UNCHANGED <<now, wfVars, stepVars, effVars, handRefund, cancelReq, offer, up, ws,
                   targetVars, histVars, temporalVars>>

HandRefund ==
    /\ handRefund = 0
    /\ \/ "hand_refund_full" \in Events /\ handRefund' = 20
       \/ "hand_refund_partial" \in Events /\ handRefund' = 10
    /\ UNCHANGED <<now, wfVars, stepVars, effVars, grantRevoked, revokeReturned, cancelReq,
                   offer, up, ws, targetVars, histVars, temporalVars>>

Cancel ==
    /\ "cancel" \in Events /\ ~cancelReq /\ wfStatus \notin Terminal /\ NoTxn
    /\ cancelReq' = TRUE
    /\ UNCHANGED <<now, wfVars, stepVars, effVars, grantRevoked, revokeReturned, handRefund,
                   offer, up, ws, targetVars, histVars, temporalVars>>

(* The target forgets keys older than its window (EMULATED prune). Measured from the first
   dispatch, which is never later than the key's creation: an over-approximation. *)
PruneKeys ==
    /\ "prune_keys" \in Events /\ Tier = 1 /\ ~keysPruned
    /\ firstDispatch >= 0 /\ now - firstDispatch > DedupAge + DedupMargin
    /\ keys' = {} /\ keysPruned' = TRUE
    /\ UNCHANGED <<now, wfVars, stepVars, effVars, worldVars, up, ws, wire, ledger, histVars,
                   temporalVars>>

(* A retry or fork re-decides and offers 30.  In Temporal this is a reset past the plain
   step: a new run with a new key re-runs the activity, while an old attempt runs on. *)
Redecide ==
    /\ "redecide" \in Events /\ offer = Payload0
    /\ Interlock => wfStatus \notin Terminal
    /\ offer' = Payload1
    /\ IF Temporal
       THEN /\ tKey' = 2 /\ tHolder' = Nobody /\ effState' = "none"
            /\ stepRow' = [stepRow EXCEPT !["effect"] = FALSE]
            /\ wfStatus' = "running"
       ELSE UNCHANGED <<tKey, tHolder, effState, stepRow, wfStatus>>
    /\ UNCHANGED <<now, wfEpoch, leaseExp, rowWrites, plainRerun, boundPayload, dispEpoch,
                   firstDispatch, sendDeadline, journal, grantRevoked, revokeReturned,
                   handRefund, cancelReq, up, ws, targetVars, histVars, tAttempt, tStart>>

-----------------------------------------------------------------------------
(***************************************************************************)
(* Time.  The clock may not pass a request's processBy (A2) unless         *)
(* SERVER_SLOW.  With URGENT it advances only when no protocol step is    *)
(* enabled (crashes and world events may still happen at any time).       *)
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

World == Revoke \/ HandRefund \/ Cancel \/ PruneKeys \/ Redecide \/ \E w \in Workers : Crash(w)

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

Symm == Permutations(Workers)

-----------------------------------------------------------------------------
(***************************************************************************)
(* Invariants: identifiers exactly as in docs/design.md#invariant-catalog and models/catalog.yaml. *)
(* Send-history fields are fixed at the transaction that authorized the    *)
(* send, except afterRevoke, premiseAtSend and prevSendSettled, which are  *)
(* read when the bytes leave.                                             *)
(***************************************************************************)
NoRerunAfterComplete == plainRerun = 0
StepResultUnique == \A s \in Steps : rowWrites[s] <= 1
FencedWrites == ~ghost.unfenced
LeaseMutex == Cardinality({w \in Workers : up[w] /\ Fence(w)}) <= 1
TakeoverOnlyAfterExpiry == ~ghost.earlyTakeover
AtMostOneCommit == Count("COMMITTED") <= 1
EffectAtMostOnceTier12 ==
    (Tier \in {1, 2} /\ ~(Tier = 1 /\ ~Queryable /\ keysPruned)) => ledger <= 1
Tier3NeverResends == ~sendBad.tier3
NoOverlappingSends == ~sendBad.overlap
CommittedImpliesApplied == effState = "committed" => ledger >= 1
AmbiguousOnlyWhenUnknowable ==
    effState = "ambiguous" =>
        (ghost.ambTier = 3 \/ (ghost.ambTier = 1 /\ ~Queryable /\ ghost.lastRecheckFailed))
CurrentDispatcherLive == dispEpoch = wfEpoch /\ wfStatus = "running" /\ leaseExp > now
EffectCheckpointAtomic ==
    (Interlock /\ effState = "committed" /\ ~stepRow["effect"]) => ~CurrentDispatcherLive
SendRequiresLiveClaim == ~sendBad.liveClaim
NoSendUnderRevokedGrant == ~sendBad.grantOk
RevokeLinearizable == ~sendBad.revoke
NoSendOnStalePremise == ~sendBad.premiseOk
PremiseTrueAtSend == ~sendBad.premiseAtSend
RecoveryRechecks == ~sendBad.recheck
PayloadBound == ~sendBad.payload
NoSendAfterCancel == ~sendBad.cancel
LateResultPreserved == lateResults = lateAcks
Resolutions == Count("COMMITTED") + Count("AMBIGUOUS")
               + Len(SelectSeq(journal, LAMBDA e : e.kind = "REFUSED"
                       /\ e.via \in {"lease_at_recovery", "stale_premise_at_recovery"}))
ReceiptChainLinear == Count("COMMITTED") <= 1 /\ Count("DISPATCHED") <= Resolutions + 1

Termination == <>(wfStatus \in Terminal)
EffectResolved ==
    (effState = "dispatched") ~> (effState \in {"committed", "ambiguous", "proposed"})

-----------------------------------------------------------------------------
(***************************************************************************)
(* Reach_* witnesses, checked as the invariant ~P: TLC's counterexample    *)
(* shows P is reachable, so a "hold" beside it is not vacuous.            *)
(***************************************************************************)
Reach_PlainRecorded == stepRow["plain"]
Reach_StaleLoad == \E w \in Workers : At(w, "run") /\ stepRow["plain"]
Reach_Takeover == ghost.tookOver
Reach_Send == sends >= 1
Reach_Resend == sends >= 2
Reach_RecoverySend == ghost.recoverySent
Reach_Commit == effState = "committed"
Reach_LateCommit == HasEntry("COMMITTED", "late-cas")
Reach_CommitOnQuery == HasEntry("COMMITTED", "recovery-query")
Reach_Ambiguous == effState = "ambiguous"
Reach_RevokeReturned == revokeReturned
Reach_RefusedLease == HasEntry("REFUSED", "lease") \/ HasEntry("REFUSED", "lease_at_recovery")
Reach_RefusedStale == HasEntry("REFUSED", "stale_premise")
                      \/ HasEntry("REFUSED", "stale_premise_at_recovery")
Reach_RefusedConflict == HasEntry("REFUSED", "conflicting_payload")
Reach_RefusedCancelled == HasEntry("REFUSED", "cancelled")
Reach_LateResult == lateAcks >= 1
Reach_Completed == wfStatus = "completed"
=============================================================================
