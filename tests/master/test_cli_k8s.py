"""``ivypy k8s manifest`` (``master.cli.k8s``): the manifests made for two test files (a
DaemonSet on the nodes' devices, a StatefulSet of raw block PVCs) validate, strictly, against
the Kubernetes API's schemas (``kubernetes-validate``); every pod runs the connect-back command
the test bed's connect-back run starts its slaves with; tests that cannot run so are refused,
saying why."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from master.cli.main import main
from tests.master.runhelp import write_config

NODES = """\
test: nodes
hosts:
  - {name: "node-[1-3]", connect_back: true}
connect_back: {listen: "0.0.0.0:9470", token_file: /etc/ivypy/token}
luns:
  - {hosts: all, wwid: "naa.60060e80*"}
steps:
  - name: s
    workloads:
      - {name: r, iosequencer: random_independent, iops: 1000}
"""
PODS = """\
test: pods
hosts:
  - {name: "ivypy-slave-[0-1]", connect_back: true}
connect_back: {listen: "0.0.0.0:9471", token_file: /etc/ivypy/token}
luns:
  - {hosts: all, path: /dev/ivypy-lun0, allow_write: true}
steps:
  - name: s
    workloads:
      - {name: w, iosequencer: random_independent, iops: 1000, read_fraction: 0%}
"""
VERSION = "1.30.0"


def _manifest(tmp: Path, text: str, *extra: str) -> list[dict[str, Any]]:
    cfg = write_config(tmp, text)
    out = tmp / "out.yaml"
    assert main(["k8s", "manifest", str(cfg), "--master", "10.0.0.5", "-o", str(out),
                 *extra]) == 0
    return list(yaml.safe_load_all(out.read_text()))


@pytest.mark.parametrize(("text", "extra", "kinds", "port", "names"), [
    (NODES, (), ["Namespace", "DaemonSet"], 9470, "spec.nodeName"),
    (PODS, ("--pvc", "fast-ssd:100Gi"), ["Namespace", "StatefulSet", "Service"], 9471,
     "metadata.name"),
])
def test_the_manifests_validate_and_run_the_connect_back_command(
        tmp_path: Path, text: str, extra: tuple[str, ...], kinds: list[str], port: int,
        names: str) -> None:
    docs = _manifest(tmp_path, text, *extra)
    assert [d["kind"] for d in docs] == kinds
    for d in docs:
        kubernetes_validate.validate(d, VERSION, strict=True)  # raises where it does not hold
    (pod,) = [d["spec"]["template"]["spec"] for d in docs if "template" in d.get("spec", {})]
    (c,) = pod["containers"]
    # the command of tests/master/test_run_connect_back.py's slaves, as installed: ivypy slave
    assert c["command"] == ["ivypy", "slave", "--connect", f"10.0.0.5:{port}", "--token-file",
                            "/etc/ivypy/token", "--name", "$(IVYPY_HOST)"]
    assert c["env"][0]["valueFrom"]["fieldRef"]["fieldPath"] == names
    assert c["securityContext"]["privileged"] is True
    assert {"name": "token", "secret": {"secretName": "ivypy-token", "defaultMode": 0o400}} \
        in pod["volumes"]
    if "--pvc" in extra:
        (claim,) = docs[1]["spec"]["volumeClaimTemplates"]
        assert claim["spec"]["volumeMode"] == "Block" and docs[1]["spec"]["replicas"] == 2
        assert c["volumeDevices"] == [{"name": "lun0", "devicePath": "/dev/ivypy-lun0"}]
    else:
        assert {"name": "dev", "mountPath": "/dev"} in c["volumeMounts"]


@pytest.mark.parametrize(("text", "extra", "says"), [
    (NODES.replace("connect_back: {listen", "#"), (),
     "host node-1 dials the master (connect_back), and the test has no connect_back"),
    (NODES.replace('  - {name: "node-[1-3]", connect_back: true}',
                   '  - {name: "node-[1-3]", connect_back: true}\n  - localhost'), (),
     "hosts localhost do not say connect_back: true"),
    (NODES, ("--pvc", "fast-ssd:100Gi"),
     "with --pvc the pods are ivypy-slave-0, ivypy-slave-1, ivypy-slave-2"),
    (PODS, ("--pvc", "fast-ssd"), "--pvc 'fast-ssd': give CLASS:SIZE"),
])
def test_a_test_that_cannot_run_as_pods_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str,
        extra: tuple[str, ...], says: str) -> None:
    cfg = write_config(tmp_path, text)
    assert main(["k8s", "manifest", str(cfg), "--master", "10.0.0.5", *extra]) == 2
    assert says in capsys.readouterr().err
