-------------------------- MODULE RuntimeInductive --------------------------
(***************************************************************************)
(* An inductive invariant for the runtime mode of Runtime.tla              *)
(* (docs/verification.md#the-inductive-argument).                          *)
(*                                                                         *)
(* IInv is the safety core (the invariants of Covered) and the auxiliary   *)
(* conjuncts that make it inductive.  Three obligations, checked by TLC    *)
(* (models/inductive.py, `make tlc-inductive`):                            *)
(*   1. Init => IInv              (Init is one state: exhaustive)          *)
(*   2. IInv /\ Next => IInv'     (from Samples states of IInv, each with  *)
(*                                 every successor: random sampling)       *)
(*   3. IInv => Safety            (by construction, checked on each state) *)
(* Together: IInv, and so Safety, holds in every reachable state at these  *)
(* constants, whatever the depth, to the extent that obligation 2's       *)
(* sample stands for all of IInv.                                          *)
(*                                                                         *)
(* Scope: MODE "interlock", no failover (ClockJump = 0), no PAUSE and no   *)
(* SERVER_SLOW (assumptions A1 and A2 hold), one or two effects.          *)
(***************************************************************************)
EXTENDS Runtime

CONSTANTS
    Samples,    \* how many random states obligation 2 starts from
    EpochMax,   \* the largest epoch a sample draws (epochs are compared, never counted)
    Drop        \* an auxiliary conjunct IInv leaves out ("none": IInv is whole)

ASSUME /\ Interlock /\ ClockJump = 0 /\ ~PAUSE /\ ~SERVER_SLOW
       /\ Samples \in Nat \ {0} /\ EpochMax \in Nat \ {0}

-----------------------------------------------------------------------------
(***************************************************************************)
(* The safety core: the invariants the argument covers (models/catalog.yaml *)
(* marks each `inductive: true`).                                          *)
(***************************************************************************)
Safety ==
    /\ FencedWrites /\ LeaseMutex /\ AtMostOneCommit /\ NoOverlappingSends
    /\ SendRequiresLiveClaim /\ RevokeLinearizable /\ Tier3NeverResends
    /\ EffectCheckpointAtomic
    /\ NoSendUnderRevokedGrant /\ NoSendOnStalePremise /\ RecoveryRechecks /\ PayloadBound
    /\ NoSendAfterCancel /\ LateResultPreserved /\ TakeoverOnlyAfterExpiry
    /\ NoRerunAfterComplete

-----------------------------------------------------------------------------
(***************************************************************************)
(* The auxiliary conjuncts, each named for what it says; why each is       *)
(* needed is in docs/verification.md#the-auxiliary-conjuncts, and          *)
(* `make tlc-inductive` drops each in turn to show that obligation 2 then  *)
(* fails.                                                                  *)
(***************************************************************************)
Busy(w) == ws[w].pc # "idle"
(* A worker that may still send: at "send" with budget left (A1: no send past it). *)
Sendable(w) == ws[w].pc = "send" /\ now < ws[w].sendBy
Holding(w) == ws[w].epoch = wfEpoch /\ wfStatus = "running"
ReqsOf(e) == {r \in wire : r.eff = e}

(* --- shape *)
(* The runtime mode: the Temporal server and its worker states are never used. *)
RuntimeShape ==
    /\ tAttempt = 0 /\ tStart = -1 /\ tHolder = Nobody /\ tKey = 1 /\ ~ghost.jumped
    /\ \A w \in Workers : ws[w].pc \notin {"tread", "tsend", "tawait", "tdone"}
(* A crash loses the process's memory: a down or idle worker remembers nothing. *)
DownIsIdle == \A w \in Workers : (~up[w] \/ ~Busy(w)) => ws[w] = IdleW

(* --- epochs: a claim takes a fresh one *)
PendingUnclaimed ==
    /\ (wfStatus = "pending") <=> (wfEpoch = 0)
    /\ wfStatus = "pending" => \A w \in Workers : ~Busy(w)
BusyEpochClaimed == \A w \in Workers : Busy(w) => ws[w].epoch \in 1..wfEpoch
DistinctEpochs == \A v, w \in Workers : v # w /\ Busy(v) /\ Busy(w) => ws[v].epoch # ws[w].epoch
PairClaimed == \A e \in Effs : dispEpoch[e] \in 0..wfEpoch

(* --- leases: the holder's local deadline is within the lease; anyone else's has passed *)
HolderWithinLease ==
    \A w \in Workers : Busy(w) /\ Holding(w) => ws[w].deadline <= leaseExp - MaxSkew
OthersExpired == \A w \in Workers : Busy(w) /\ ~Holding(w) => ws[w].deadline <= now
(* A load that saw no plain step row is stale once the row exists: only a successor wrote it. *)
StaleLoadNotHolder == \A w \in Workers : ws[w].pc = "run" /\ stepRow["plain"] => ~Holding(w)

(* --- an open T_dispatch, and the stopwatch started before a transaction's now() *)
StopwatchFirst ==
    \A w \in Workers : ws[w].pc \in {"dbegin", "resolve"} => ws[w].sendBy <= now + SendTimeout
OpenDispatch ==
    \A w \in Workers :
       ws[w].pc = "dcommit" =>
          /\ ws[w].fenced /\ Holding(w) /\ 0 <= ws[w].txnNow /\ ws[w].txnNow <= now
          /\ ws[w].sendBy <= ws[w].txnNow + SendTimeout

(* --- the effect rows *)
CommitCount == \A e \in Effs : Count(e, "COMMITTED") = IF effState[e] = "committed" THEN 1 ELSE 0
Undispatched ==
    \A e \in Effs :
       effState[e] = "none" =>
          /\ firstDispatch[e] = -1 /\ sendDeadline[e] = -1 /\ lastSendDL[e] = -1
          /\ effSends[e] = 0 /\ ReqsOf(e) = {} /\ boundPayload[e] = 0 /\ dispEpoch[e] = 0
ProposedRecorded == \A e \in Effs : effState[e] = "proposed" => stepRow[StepOf(e)]
DispatchClocks ==
    \A e \in Effs :
       effState[e] \notin {"none", "proposed"} =>
          /\ 0 <= firstDispatch[e] /\ firstDispatch[e] <= now
          /\ lastSendDL[e] <= sendDeadline[e]
(* A commit without its step row came by the late path, whose worker then left the run. *)
LateCommitOrphan ==
    \A e \in Effs :
       effState[e] = "committed" /\ ~stepRow[StepOf(e)] =>
          \A w \in Workers : Busy(w) => ws[w].epoch # dispEpoch[e]

(* --- a worker at the send: everything the send will be judged on *)
SendMeta ==
    \A w \in Workers :
       LET m == ws[w].meta
           e == ws[w].eff
       IN Sendable(w) =>
             /\ m.eff = e /\ m.key = e /\ m.liveClaim /\ m.grantOk /\ m.premiseOk
             /\ m.recheckOk /\ m.payload = boundPayload[e] /\ (m.afterCancel => m.recovery)
SendablePair ==
    \A w \in Workers :
       Sendable(w) => effState[ws[w].eff] = "dispatched" /\ dispEpoch[ws[w].eff] = ws[w].epoch
SendableDeadline ==
    \A w \in Workers :
       Sendable(w) => /\ ws[w].meta.deadline = sendDeadline[ws[w].eff]
                      /\ ws[w].sendBy <= ws[w].meta.deadline
SendableRevoke ==
    \A w \in Workers :
       LET e == ws[w].eff IN
       Sendable(w) /\ grantRevoked[GrantOf(e)] => e \in revokeReturned[GrantOf(e)]
SendableSettled ==
    \A w \in Workers :
       LET e == ws[w].eff IN
       Sendable(w) => lastSendDL[e] < 0 \/ lastSendDL[e] + SettleMargin < now
SendableFirst ==
    \A w \in Workers : Sendable(w) /\ ~ws[w].meta.recovery => effSends[ws[w].eff] = 0
SendableTier ==
    \A w \in Workers :
       Sendable(w) /\ ws[w].meta.recovery =>
          Tier # 3 /\ ~(Tier = 1 /\ ~Queryable /\ ws[w].meta.pastWindow)
SendableQuiet == \A w \in Workers : Sendable(w) => ReqsOf(ws[w].eff) = {}

(* --- requests in flight *)
(* Processed by their bound (A2), which the last send's deadline sets. *)
RequestBound ==
    \A r \in wire :
       /\ r.eff \in Effs /\ r.key = r.eff /\ r.by \in Workers /\ r.id \in 1..sends
       /\ now <= r.processBy /\ r.processBy <= lastSendDL[r.eff] + SettleMargin - MaxSkew
RequestOpen ==
    \A r \in wire :
       /\ effState[r.eff] = "dispatched"
       /\ grantRevoked[GrantOf(r.eff)] => r.eff \in revokeReturned[GrantOf(r.eff)]
OneRequest == \A r1, r2 \in wire : r1.eff = r2.eff => r1 = r2
(* While the dispatcher waits, the request in flight is its own; once answered, none is. *)
OwnRequest ==
    \A w \in Workers :
       LET e == ws[w].eff IN
       effState[e] = "dispatched" /\ dispEpoch[e] = ws[w].epoch =>
          /\ ws[w].pc = "await" => \A r \in ReqsOf(e) : r.id = ws[w].awaitId
          /\ ws[w].pc = "tcommit" => ReqsOf(e) = {}

AuxNames ==
    <<"RuntimeShape", "DownIsIdle", "PendingUnclaimed", "BusyEpochClaimed", "DistinctEpochs",
      "PairClaimed", "HolderWithinLease", "OthersExpired", "StaleLoadNotHolder",
      "StopwatchFirst", "OpenDispatch", "CommitCount", "Undispatched", "ProposedRecorded",
      "DispatchClocks", "LateCommitOrphan", "SendMeta", "SendablePair", "SendableDeadline",
      "SendableRevoke", "SendableSettled", "SendableFirst", "SendableTier", "SendableQuiet",
      "RequestBound", "RequestOpen", "OneRequest", "OwnRequest">>
Aux(k) ==
    CASE k = "RuntimeShape" -> RuntimeShape [] k = "DownIsIdle" -> DownIsIdle
      [] k = "PendingUnclaimed" -> PendingUnclaimed [] k = "BusyEpochClaimed" -> BusyEpochClaimed
      [] k = "DistinctEpochs" -> DistinctEpochs [] k = "PairClaimed" -> PairClaimed
      [] k = "HolderWithinLease" -> HolderWithinLease [] k = "OthersExpired" -> OthersExpired
      [] k = "StaleLoadNotHolder" -> StaleLoadNotHolder [] k = "StopwatchFirst" -> StopwatchFirst
      [] k = "OpenDispatch" -> OpenDispatch [] k = "CommitCount" -> CommitCount
      [] k = "Undispatched" -> Undispatched [] k = "ProposedRecorded" -> ProposedRecorded
      [] k = "DispatchClocks" -> DispatchClocks [] k = "LateCommitOrphan" -> LateCommitOrphan
      [] k = "SendMeta" -> SendMeta [] k = "SendablePair" -> SendablePair
      [] k = "SendableDeadline" -> SendableDeadline [] k = "SendableRevoke" -> SendableRevoke
      [] k = "SendableSettled" -> SendableSettled [] k = "SendableFirst" -> SendableFirst
      [] k = "SendableTier" -> SendableTier [] k = "SendableQuiet" -> SendableQuiet
      [] k = "RequestBound" -> RequestBound [] k = "RequestOpen" -> RequestOpen
      [] k = "OneRequest" -> OneRequest [] k = "OwnRequest" -> OwnRequest

(* Drop names one auxiliary conjunct to leave out ("none": all of them), to show it is needed. *)
ASSUME Drop \in {"none"} \cup {AuxNames[i] : i \in 1..Len(AuxNames)}
IInv == Safety /\ \A i \in 1..Len(AuxNames) : AuxNames[i] = Drop \/ Aux(AuxNames[i])

-----------------------------------------------------------------------------
(***************************************************************************)
(* The sampler for obligation 2.  One RandomElement draw of Draws gives a  *)
(* record of independent choices; StateOf maps it to a state.  Each choice *)
(* is an index into a table (Pick), so the tables weigh the draw toward    *)
(* the states where the protocol decides: the holder running, the effect   *)
(* dispatched by a busy worker, checks that pass.  Clocks are drawn as     *)
(* offsets from now and epochs as distances below wfEpoch, so boundaries   *)
(* (a deadline one tick away, a pair one epoch old) come up often.  A      *)
(* field is fixed only where IInv forces its value, or where no action and *)
(* no covered invariant reads it at that pc (a dead field: states that     *)
(* differ only there have the same futures as far as IInv can tell);       *)
(* docs/verification.md#the-sampler lists them.                            *)
(***************************************************************************)
Pick(t, i) == t[1 + (i % Len(t))]
Idx(t) == 0..(Len(t) - 1)
Mostly(b) == IF b THEN <<TRUE, TRUE, TRUE, FALSE>> ELSE <<FALSE, FALSE, FALSE, TRUE>>
T_status == <<"running", "running", "running", "running", "running", "pending", "completed",
              "cancelled">>
T_pc == <<"load", "run", "plain", "effect", "dbegin", "dcommit", "dcommit", "send", "send",
          "await", "await", "tcommit", "tcommit", "ckpt", "recover", "resolve", "resolve",
          "resolve", "finish", "idle">>
T_dist == <<0, 0, 0, 0, 1, 2>>
T_st == <<"none", "proposed", "dispatched", "dispatched", "dispatched", "committed",
          "ambiguous">>
T_pay == <<Payload0, Payload0, Payload0, Payload1>>
T_hand == <<0, 0, 0, 10, 20>>
(* Whose epoch a dispatch pair or a recovery read names. *)
T_pair == <<"w1", "w1", "w2", "w2", "far">>
T_read == <<"pair", "pair", "pair", "far">>
T_tier == <<Tier, Tier, 1, 2, 3>>
WDraw == [pc: Idx(T_pc), ek: Idx(T_dist), dl: -2..LeaseTTL, sb: -2..SendTimeout, tn: -2..0,
          readOk: Idx(Mostly(TRUE)), grantRead: BOOLEAN, found: BOOLEAN, effTier: Idx(T_tier),
          rk: Idx(T_read), rfar: 0..2, mcancel: BOOLEAN, mpast: BOOLEAN,
          mdl: -1..SendTimeout, mrec: BOOLEAN, eff: Effs, aw: 0..3, up: Idx(Mostly(TRUE))]
EDraw == [st: Idx(T_st), pay: Idx(T_pay), dk: Idx(T_pair), dfar: 0..2, fd: 0..MaxClock,
          sd: (-SettleMargin - 3)..SendTimeout, lsd: {-1, 0, 1, 2, 3}, ledger: 0..2,
          sends: 0..2, req: BOOLEAN, rby: Workers, rpb: 0..(SettleMargin + 1), clocks: BOOLEAN]
Draws == [now: 0..MaxClock, status: Idx(T_status), epoch: 0..EpochMax, lease: -3..LeaseTTL,
          plain: BOOLEAN, rows: [Effs -> BOOLEAN], eff: [Effs -> EDraw], w: [Workers -> WDraw],
          revoked: [Grants -> Idx(Mostly(FALSE))], returned: [Grants -> SUBSET Effs],
          hand: Idx(T_hand), cancel: Idx(Mostly(FALSE)), offer: Idx(T_pay),
          local: Idx(Mostly(TRUE)), keys: SUBSET Effs, pruned: BOOLEAN, sendsExtra: 0..1]

Clip(x, lo) == IF x < lo THEN lo ELSE x
(* The workers by name for the tables: w1 and w2 stand for the first and second of Workers. *)
WOrder == CHOOSE f \in [1..Cardinality(Workers) -> Workers] :
              \A i, j \in DOMAIN f : i # j => f[i] # f[j]
WorkerNo(i) == WOrder[1 + ((i - 1) % Cardinality(Workers))]

(* The state drawn by d. *)
StateOf(d) ==
    LET n == d.now
        status == Pick(T_status, d.status)
        ep == IF status = "pending" THEN 0 ELSE Clip(d.epoch, 1)
        W(w) == d.w[w]
        pc(w) == IF Pick(Mostly(TRUE), W(w).up) /\ status # "pending" THEN Pick(T_pc, W(w).pc)
                 ELSE "idle"
        wep(w) == Clip(ep - Pick(T_dist, W(w).ek), 1)
        E(e) == d.eff[e]
        st(e) == Pick(T_st, E(e).st)
        \* a refusal at recovery leaves a proposed effect with the clocks of its dispatch
        fd(e) == IF st(e) = "none" \/ (st(e) = "proposed" /\ ~E(e).clocks) THEN -1
                 ELSE Clip(n - E(e).fd, 0)
        sd(e) == IF fd(e) < 0 THEN -1 ELSE Clip(n + E(e).sd, fd(e) + SendTimeout)
        lsd(e) == IF fd(e) < 0 \/ E(e).lsd < 0 THEN -1 ELSE sd(e) - E(e).lsd
        pairOf(e) == LET who == Pick(T_pair, E(e).dk) IN
                     IF fd(e) < 0 THEN 0
                     ELSE IF who = "w1" /\ pc(WorkerNo(1)) # "idle" THEN wep(WorkerNo(1))
                     ELSE IF who = "w2" /\ pc(WorkerNo(2)) # "idle" THEN wep(WorkerNo(2))
                     ELSE Clip(ep - E(e).dfar, 0)
        Req(e) == [id |-> e, key |-> e, by |-> E(e).rby, eff |-> e, processBy |-> n + E(e).rpb]
        Worker(w) ==
            IF pc(w) = "idle" THEN IdleW
            ELSE LET p == pc(w)
                     e == IF p \in {"load", "run", "plain", "finish"} THEN 1 ELSE W(w).eff
                     live(ps) == p \in ps
                 IN [IdleW EXCEPT
                       !.pc = p, !.epoch = wep(w), !.deadline = n + W(w).dl, !.eff = e,
                       !.readOk = live({"dbegin", "dcommit", "resolve"})
                                  /\ Pick(Mostly(TRUE), W(w).readOk),
                       !.grantRead = live({"dbegin", "dcommit"}) /\ W(w).grantRead,
                       !.sendBy = IF live({"dbegin", "dcommit", "send", "await", "resolve"})
                                  THEN n + W(w).sb ELSE -1,
                       !.txnNow = IF live({"dcommit"}) THEN Clip(n + W(w).tn, 0) ELSE -1,
                       !.fenced = live({"dcommit"}),
                       !.found = live({"resolve"}) /\ W(w).found,
                       !.effTier = IF live({"resolve"}) THEN Pick(T_tier, W(w).effTier) ELSE 0,
                       !.readPair = IF ~live({"resolve"}) THEN 0
                                    ELSE IF Pick(T_read, W(w).rk) = "pair" THEN pairOf(e)
                                    ELSE Clip(ep - W(w).rfar, 0),
                       !.awaitId = IF live({"await"}) THEN W(w).aw ELSE 0,
                       !.meta = IF ~live({"send"}) THEN NoMeta
                                ELSE [liveClaim |-> TRUE, grantOk |-> TRUE, premiseOk |-> TRUE,
                                      payload |-> Pick(T_pay, E(e).pay), recheckOk |-> TRUE,
                                      afterCancel |-> W(w).mcancel /\ W(w).mrec,
                                      pastWindow |-> W(w).mpast, deadline |-> n + W(w).mdl,
                                      key |-> e, recovery |-> W(w).mrec, eff |-> e]]
    IN
    /\ now = n
    /\ wfStatus = status /\ wfEpoch = ep
    /\ leaseExp = IF status = "pending" THEN 0 ELSE n + d.lease
    /\ stepRow = [s \in Steps |-> IF s = "plain" THEN d.plain
                                  ELSE d.rows[CHOOSE e \in Effs : StepOf(e) = s]]
    /\ rowWrites = [s \in Steps |-> 0] /\ plainRerun = 0
    /\ effState = [e \in Effs |-> st(e)]
    /\ boundPayload = [e \in Effs |-> IF st(e) = "none" THEN 0 ELSE Pick(T_pay, E(e).pay)]
    /\ dispEpoch = [e \in Effs |-> pairOf(e)]
    /\ firstDispatch = [e \in Effs |-> fd(e)]
    /\ sendDeadline = [e \in Effs |-> sd(e)]
    /\ journal = SelectSeq(<<Entry(1, "COMMITTED", "send"), Entry(2, "COMMITTED", "send")>>,
                           LAMBDA x : x.eff \in Effs /\ st(x.eff) = "committed")
    /\ grantRevoked = [g \in Grants |-> Pick(Mostly(FALSE), d.revoked[g])]
    /\ revokeReturned = d.returned
    /\ handRefund = Pick(T_hand, d.hand) /\ cancelReq = Pick(Mostly(FALSE), d.cancel)
    /\ offer = Pick(T_pay, d.offer) /\ localOk = Pick(Mostly(TRUE), d.local)
    /\ up = [w \in Workers |-> Pick(Mostly(TRUE), W(w).up)]
    /\ ws = [w \in Workers |-> Worker(w)]
    /\ wire = {Req(e) : e \in {f \in Effs : E(f).req /\ fd(f) >= 0}}
    /\ ledger = [e \in Effs |-> E(e).ledger]
    /\ keys = d.keys /\ keysPruned = d.pruned
    /\ sends = NEffects + d.sendsExtra
    /\ effSends = [e \in Effs |-> IF fd(e) < 0 THEN 0 ELSE E(e).sends]
    /\ sendBad = NoBad
    /\ lastSendDL = [e \in Effs |-> lsd(e)]
    /\ lateResults = 0 /\ lateAcks = 0 /\ crashes = 0 /\ ghost = GhostFlags
    /\ tAttempt = 0 /\ tStart = -1 /\ tHolder = Nobody /\ tKey = 1

(* Obligation 2's initial states: Samples draws, kept where IInv holds. *)
SampleInit == \E k \in 1..Samples : \E d \in {RandomElement(Draws)} : StateOf(d) /\ IInv

(* Successors of the samples are checked, never expanded. *)
OneStep == TLCGet("level") < 2
=============================================================================
