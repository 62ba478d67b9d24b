"""The exec transport: a host reached through a command prefix that gives a pipe to it
(``kubectl exec -i -n NS POD --``, ``ip netns exec NS``, ``docker exec -i NAME``, ``srun``).

Owns ``open_exec`` and the bootstrap the host's Python runs: the slave's zipapp goes down the
same pipe the protocol then speaks over (no copy step, no SSH), its sha256 checked. The host's
Python is checked first through the same prefix, as the SSH transport checks it
(``master.hosts.transport.check_probe``). Must not run a shell: the prefix's words go to it as
they are.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shlex
from collections.abc import Callable

from master.hosts.slaveloop import slave_zipapp
from master.hosts.transport import (
    PROBE_SCRIPT,
    PROBE_TIMEOUT_S,
    LocalSlaveConnection,
    SlaveConnection,
    check_probe,
    describe_error,
    foreign_errors,
)
from master.hosts.zipapp import SlaveZipapp
from protocol.errors import HostError, SlaveStartError

logger = logging.getLogger(__name__)


#: Run by the host's Python behind an exec prefix: reads the slave's zipapp (its length and
#: sha256 in argv) from stdin, byte for byte (the protocol follows on the same pipe: nothing
#: is read ahead), keeps it as ~/.cache/ivypy/slave-<hash16>.pyz (a temporary directory where
#: that cannot be written), and runs it with the slave's arguments. Written for old Pythons too.
EXEC_BOOTSTRAP = (
    "import hashlib, os, sys, tempfile\n"
    "n, sha = int(sys.argv[1]), sys.argv[2]\n"
    "data = bytearray()\n"
    "while len(data) < n:\n"
    "    got = os.read(0, min(1 << 20, n - len(data)))\n"
    "    if not got:\n"
    "        sys.exit('ivypy: the slave zipapp was cut short after %d of %d bytes' "
    "% (len(data), n))\n"
    "    data += got\n"
    "if hashlib.sha256(data).hexdigest() != sha:\n"
    "    sys.exit('ivypy: the slave zipapp arrived damaged (its sha256 differs)')\n"
    "path = None\n"
    "for d in (os.path.join(os.path.expanduser('~'), '.cache', 'ivypy'), tempfile.gettempdir()):\n"
    "    try:\n"
    "        os.makedirs(d, exist_ok=True)\n"
    "        path = os.path.join(d, 'slave-%s.pyz' % sha[:16])\n"
    "        tmp = '%s.tmp-%d' % (path, os.getpid())\n"
    "        with open(tmp, 'wb') as f:\n"
    "            f.write(data)\n"
    "        os.replace(tmp, path)\n"
    "        break\n"
    "    except OSError:\n"
    "        path = None\n"
    "if path is None:\n"
    "    sys.exit('ivypy: no folder to keep the slave zipapp in (~/.cache/ivypy, the temp dir)')\n"
    "sys.argv = [path] + sys.argv[3:]\n"
    "import runpy\n"
    "runpy.run_path(path, run_name='__main__')\n"
)


async def open_exec(
    host_name: str,
    prefix: tuple[str, ...],
    python: str = "python3",
    *,
    zipapp: SlaveZipapp | None = None,
    on_stderr_line: Callable[[str], None] | None = None,
    slave_args: tuple[str, ...] = (),
) -> SlaveConnection:
    """Start the slave through ``prefix`` (``kubectl exec -i POD --``, ``ip netns exec NS``):
    ``prefix python -c PROBE`` checks the host's Python as the SSH transport does, then
    ``prefix python -c BOOTSTRAP <length> <sha256> <slave_args>`` takes the zipapp on its
    stdin and runs it; the protocol follows on the same pipe. No shell runs either: the words
    go to the prefix as they are (``python`` split as a shell would). ``HostError`` when the
    prefix cannot run or ends (naming the command and what it said), ``SlaveStartError`` for
    the host's Python."""
    app = zipapp if zipapp is not None else await slave_zipapp()
    argv = [*prefix, *shlex.split(python)]
    command = shlex.join(prefix)
    try:
        probe = await asyncio.create_subprocess_exec(
            *argv, "-c", PROBE_SCRIPT, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            start_new_session=True)
        try:
            out, err = await asyncio.wait_for(probe.communicate(), PROBE_TIMEOUT_S)
        except asyncio.TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                probe.kill()
            raise HostError(f"no answer after {PROBE_TIMEOUT_S:g} s from {command} while "
                            "checking the host's python", host=host_name) from None
        text = err.decode("utf-8", "replace")
        if probe.returncode != 0 and not out:  # the prefix itself failed (no pod, no netns)
            tail = " ".join(text.split())[-400:] or f"exit status {probe.returncode}"
            if probe.returncode not in (126, 127) or python not in text:
                raise HostError(f"{command} failed: {tail}", host=host_name)
        check_probe(host_name, python, probe.returncode, out.decode("utf-8", "replace"), text)
        proc = await asyncio.create_subprocess_exec(
            *argv, "-c", EXEC_BOOTSTRAP, str(app.size_bytes), app.sha256, *slave_args,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, start_new_session=True)
    except FileNotFoundError as exc:
        raise HostError(f"cannot run {command}: {exc.strerror or exc}", host=host_name) from exc
    except foreign_errors() as exc:
        raise SlaveStartError(describe_error(exc, PROBE_TIMEOUT_S), host=host_name) from exc
    connection = LocalSlaveConnection(host_name, proc, f"{command} (slave-{app.hash16}.pyz)",
                                       on_stderr_line)
    try:
        await connection.write(app.data)  # the bootstrap reads it before the protocol
    except HostError:
        await connection.close(0.5)
        raise
    logger.info("host %s: started slave through %s (pid %d here)", host_name, command, proc.pid)
    return connection
