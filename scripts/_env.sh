# Sourced by scripts/*: creates or refreshes the project's virtualenv and installs what the
# project needs (pip packages; Debian packages when running as root). Idempotent and quiet when
# everything is already there.
set -euo pipefail
IVYPY_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${IVYPY_VENV:-$IVYPY_ROOT/.venv}"
PYTHON="${PYTHON:-python3}"

# Debian packages the integration tests and benchmarks use: fio (reference engine and fio logs),
# OpenSSH (multi-host test bed), e2fsprogs (ext4 signatures), util-linux (losetup, blkid, mount),
# iproute2 (network namespaces), procps, psmisc; python3-numpy and python3-psutil so that the
# system python3 can run the slave zipapp on the namespace test hosts, as a real lab host would;
# the mkfs tools of f2fs, jfs, reiserfs, nilfs2, ocfs2 and gfs2, whose real images test our own
# signature probe against blkid (tests/slave/test_signatures.py); tmux, the terminal the live
# view is read back from (tests/master/test_run_live_terminal.py); chromium, the headless browser
# that loads report.html (tests/master/test_report_chromium.py, test_run_report.py);
# prometheus-node-exporter, a real Prometheus endpoint for the gather: sources
# (tests/master/test_gather_prometheus.py); prometheus, a real server that scrapes a running
# test's live metrics (tests/master/test_live_metrics_prometheus.py); pipx, which installs a read-only checkout as a user
# does (tests/test_install.py; the README's install with pipx is Debian's).
IVYPY_DEBS="fio gcc libc6-dev python3-numpy python3-psutil openssh-server openssh-client e2fsprogs util-linux iproute2 procps psmisc f2fs-tools jfsutils reiserfsprogs nilfs-tools ocfs2-tools gfs2-utils tmux chromium prometheus-node-exporter prometheus pipx"

ivypy_install_debs() {
    if [ "$(id -u)" != "0" ] || ! command -v apt-get >/dev/null 2>&1; then
        return 0
    fi
    local missing=()
    for p in $IVYPY_DEBS; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        echo "[ivypy] installing Debian packages: ${missing[*]}" >&2
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq >&2
        apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
    fi
}

ivypy_venv() {
    if [ ! -x "$VENV/bin/python" ]; then
        echo "[ivypy] creating virtualenv $VENV" >&2
        "$PYTHON" -m venv "$VENV"
    fi
    local stamp="$VENV/.ivypy-installed"
    local want
    want="$(cat "$IVYPY_ROOT/pyproject.toml" | sha256sum | cut -d' ' -f1)"
    if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
        echo "[ivypy] installing ivypy and its test extras into $VENV" >&2
        "$VENV/bin/python" -m pip install -q --upgrade pip >&2
        # --no-compile: pip's byte-compiling of every dependency (numpy, asyncssh, rich ...)
        # took 12 of the 32 s here (with numba, since dropped), and scripts/test's runs never
        # read it (their bytecode is in PYTHONPYCACHEPREFIX); elsewhere a module is compiled
        # when first imported
        "$VENV/bin/python" -m pip install -q --no-compile -e "$IVYPY_ROOT[test]" >&2
        # the build backend is hatchling, which writes nothing here: the metadata setuptools
        # left in the checkout would otherwise be a second, stale ivypy on the root's sys.path
        rm -rf "$IVYPY_ROOT/ivypy.egg-info"
        echo "$want" > "$stamp"
    fi
}

# the static checks (scripts/check; scripts/test runs them beside the suite): ruff, then
# mypy --strict; run from the checkout's root
ivypy_static_checks() {
    "$VENV/bin/ruff" check ivypy protocol slave master tests scripts && "$VENV/bin/mypy"
}
