"""``ivypy k8s manifest TEST.yaml --master HOST``: what a user applies to run a test's hosts as
Kubernetes pods that dial the master (connect-back; docs/kubernetes.md).

Thin: the test read and checked (it must listen for its hosts: ``connect_back:``, and every
host dials: ``connect_back: true``), then one YAML stream written: the namespace, and either a
DaemonSet of privileged slave pods, one per node, with the node's devices (``/dev``, ``/sys``:
the test's ``luns:`` then select by WWID or serial, which name a LUN the same on every node,
not by ``/dev/sdX``), each pod named in the test by its node's name; or, with ``--pvc
CLASS:SIZE``, a StatefulSet of as many pods as the test has hosts, each with a raw block PVC
(``volumeMode: Block``) at ``/dev/ivypy-lun0``, each pod named by its own name. Every pod runs
``ivypy slave --connect HOST:PORT --token-file /etc/ivypy/token --name NAME`` with the run's
token from a Secret the user makes (``kubectl create secret generic ...``: this command writes
no secret). Exit 0, or 2 with the reason.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

from master.config import TestConfig, load_config
from protocol.errors import ConfigError

#: where the pods find the run's token (the Secret's key ``token``)
TOKEN_DIR = "/etc/ivypy"
#: where a StatefulSet pod's raw block PVC appears
PVC_DEVICE = "/dev/ivypy-lun0"
APP = "ivypy-slave"


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "k8s", help="Kubernetes manifests for a test's connect-back hosts",
        description="Write the manifests that run a test's hosts as Kubernetes pods dialling "
        "the master (connect-back). See docs/kubernetes.md.")
    sub = p.add_subparsers(dest="k8s_command", metavar="WHAT", required=True)
    m = sub.add_parser(
        "manifest", help="the namespace and the slave pods of TEST.yaml",
        usage="ivypy k8s manifest [-h] --master HOST [--image IMAGE] [--namespace NS] "
        "[--token-secret NAME] [--pvc CLASS:SIZE] [-o FILE] TEST.yaml",
        description="A DaemonSet of privileged slave pods, one per node, with the nodes' "
        "devices (the test's luns: by wwid or serial, its hosts named as the nodes); or with "
        "--pvc a StatefulSet of one pod per host of the test, each with a raw block PVC at "
        f"{PVC_DEVICE} (its hosts named NAME-0, NAME-1 ...). Each pod runs ivypy slave "
        "--connect to the master with the token of the Secret --token-secret names (make it "
        "with: kubectl create secret generic NAME -n NS --from-file=token=FILE).")
    m.add_argument("test", metavar="TEST.yaml")
    m.add_argument("--master", required=True, metavar="HOST",
                   help="the address the pods reach the master at (its connect_back port is "
                   "the test's)")
    m.add_argument("--image", default="ivypy:latest",
                   help="an image with ivypy installed (default ivypy:latest)")
    m.add_argument("--namespace", default="ivypy", metavar="NS")
    m.add_argument("--token-secret", default="ivypy-token", metavar="NAME")
    m.add_argument("--pvc", metavar="CLASS:SIZE",
                   help="a StatefulSet with a raw block PVC of this storage class and size "
                   "per pod (e.g. fast-ssd:100Gi), instead of the DaemonSet")
    m.add_argument("--name", default=APP, help=f"the workload's name (default {APP})")
    m.add_argument("-o", "--output", metavar="FILE", help="write here (default: stdout)")
    m.set_defaults(func=manifest_command)


def manifest_command(args: argparse.Namespace) -> int:
    try:
        cfg = load_config(args.test)
        docs = manifests(cfg, master=args.master, image=args.image, namespace=args.namespace,
                         secret=args.token_secret, pvc=args.pvc, name=args.name)
    except ConfigError as exc:
        for line in str(exc).splitlines():
            print(f"ivypy: k8s: {line}", file=sys.stderr)
        return 2
    text = yaml.safe_dump_all(docs, sort_keys=False)
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


def slave_args(master: str, port: int, name: str, token_file: str = f"{TOKEN_DIR}/token"
               ) -> list[str]:
    """The connect-back slave's command line, as every pod runs it (and the test bed's
    connect-back run starts its slaves with)."""
    return ["ivypy", "slave", "--connect", f"{master}:{port}", "--token-file", token_file,
            "--name", name]


def manifests(cfg: TestConfig, *, master: str, image: str, namespace: str, secret: str,
              pvc: str | None, name: str = APP) -> list[dict[str, Any]]:
    """The documents for ``cfg``'s hosts; ``ConfigError`` where the test cannot run so."""
    cb = cfg.connect_back
    if cb is None:
        raise ConfigError("the test has no connect_back: {listen: ADDR:PORT, token_file: "
                          "FILE}: pods can only dial a master that listens for them",
                          file=cfg.source_file)
    others = [h.name for h in cfg.hosts if h.transport != "connect_back"]
    if others:
        raise ConfigError(f"hosts {', '.join(others)} do not say connect_back: true: a pod "
                          "dials the master (host entries {name: NAME, connect_back: true})",
                          file=cfg.source_file)
    labels = {"app": name, "ivypy/test": cfg.test}
    token = {"name": "token", "secret": {"secretName": secret, "defaultMode": 0o400}}
    container: dict[str, Any] = {
        "name": "slave", "image": image, "imagePullPolicy": "IfNotPresent",
        "securityContext": {"privileged": True},
        "env": [{"name": "IVYPY_HOST", "valueFrom": {"fieldRef": {
            "fieldPath": "spec.nodeName" if pvc is None else "metadata.name"}}}],
        "command": slave_args(master, cb.port, "$(IVYPY_HOST)"),
        "volumeMounts": [{"name": "token", "mountPath": TOKEN_DIR, "readOnly": True}],
    }
    pod: dict[str, Any] = {"metadata": {"labels": labels},
                           "spec": {"restartPolicy": "Always", "containers": [container],
                                    "volumes": [token]}}
    docs: list[dict[str, Any]] = [{"apiVersion": "v1", "kind": "Namespace",
                                   "metadata": {"name": namespace}}]
    meta = {"name": name, "namespace": namespace, "labels": labels}
    if pvc is None:
        container["volumeMounts"] += [{"name": "dev", "mountPath": "/dev"},
                                      {"name": "sys", "mountPath": "/sys"}]
        pod["spec"]["volumes"] += [{"name": "dev", "hostPath": {"path": "/dev",
                                                                "type": "Directory"}},
                                   {"name": "sys", "hostPath": {"path": "/sys",
                                                                "type": "Directory"}}]
        docs.append({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": meta,
                     "spec": {"selector": {"matchLabels": labels}, "template": pod}})
        return docs
    storage_class, _, size = pvc.partition(":")
    if not storage_class or not size:
        raise ConfigError(f"--pvc {pvc!r}: give CLASS:SIZE, e.g. fast-ssd:100Gi")
    wanted = [f"{name}-{i}" for i in range(len(cfg.hosts))]
    if sorted(h.name for h in cfg.hosts) != sorted(wanted):
        raise ConfigError(f"with --pvc the pods are {', '.join(wanted)}: the test's hosts must "
                          f"be named so ({{name: \"{name}-[0-{len(wanted) - 1}]\", "
                          "connect_back: true}), not "
                          f"{', '.join(h.name for h in cfg.hosts)}", file=cfg.source_file)
    container["volumeDevices"] = [{"name": "lun0", "devicePath": PVC_DEVICE}]
    docs.append({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": meta, "spec": {
        "serviceName": name, "replicas": len(wanted), "podManagementPolicy": "Parallel",
        "selector": {"matchLabels": labels}, "template": pod,
        "volumeClaimTemplates": [{"metadata": {"name": "lun0"}, "spec": {
            "accessModes": ["ReadWriteOnce"], "volumeMode": "Block",
            "storageClassName": storage_class, "resources": {"requests": {"storage": size}}}}]}})
    docs.append({"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": {
        "clusterIP": "None", "selector": labels}})
    return docs
