#!/usr/bin/env python3
"""Checks of deploy/k8s: every kustomization renders, every object is valid, and the pods are
deployable the way docs/deploy.md says.

usage: k8s_manifests_test.py --source REPO_ROOT [--kubectl PATH]

1. `kubectl kustomize` renders overlays/cpu-demo, overlays/gpu, overlays/cpu-demo-mtls (cpu-demo
   with components/mtls), the gpu overlay with components/mtls and cpu-demo with
   components/https added (in a scratch copy of deploy/k8s) and monitoring.
2. Every built-in object validates offline against the Kubernetes OpenAPI schemas (package
   kubernetes-validate, strict: unknown fields are errors) of the oldest and the newest version
   the package ships. The Prometheus Operator's objects (ServiceMonitor, PrometheusRule) have no
   schema there; they are checked here instead: the PrometheusRule must equal
   deploy/prometheus/strata-rules.yaml, and the ServiceMonitor must scrape a port the Services
   define.
3. Lint: every container has a pinned image, liveness/readiness probes, CPU and memory requests and
   limits, and a restrictive securityContext; every $(VAR) in args is defined; grace periods cover
   the drain; selectors match pods; workers advertise their pod IP; workers' KV pool and device
   flags are ones `strata worker` accepts; the gpu overlay asks for one GPU per worker, device 0
   and a memory share of it; with components/mtls every router, worker and kvstore pod passes
   --tls-ca/--tls-cert/--tls-key from a whole-Secret mount of strata-cluster-tls (cert-manager's
   keys), so rotated certificates reach the files; with components/https the router passes
   --http-tls-cert/--http-tls-key from a whole-Secret mount of strata-api-tls and probes over HTTPS.
   The lint's own checks are tested on broken copies, so a lint that accepts everything fails.

Exits 77 (ctest: skipped) when no kubectl is installed (Debian: kubernetes-client).
"""
import argparse
import copy
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

try:
  import yaml
  import kubernetes_validate
  from kubernetes_validate import utils as kv_utils
except ImportError as e:  # the venv of scripts/test.sh installs these
  print(f"k8s_manifests_test: {e}; pip install kubernetes-validate (scripts/test.sh does)",
        file=sys.stderr)
  sys.exit(1)

ARGS = None
RENDERED = {}  # kustomization dir (relative to deploy/k8s) -> list of objects
KUSTOMIZATIONS = ["overlays/cpu-demo", "overlays/gpu", "overlays/cpu-demo-mtls", "monitoring"]
# Kustomizations with a Component, which kustomize before v3.7 (kubectl 1.20) cannot render:
# there their checks are skipped, with the reason.
NEEDS_COMPONENTS = {"overlays/cpu-demo-mtls", "overlays/gpu+components/mtls",
                    "overlays/cpu-demo+components/https"}
NOT_RENDERED = {}  # kustomization -> why
WORKLOAD_KINDS = {"Deployment", "StatefulSet", "DaemonSet"}
CRD_KINDS = {("monitoring.coreos.com/v1", "ServiceMonitor"),
             ("monitoring.coreos.com/v1", "PrometheusRule")}
# Objects an overlay references but expects the operator to create (docs/deploy.md).
EXTERNAL = {("overlays/gpu", "Secret", "strata-api-keys"),
            ("overlays/gpu", "Secret", "strata-kv-hash-key"),
            ("overlays/cpu-demo-mtls", "Secret", "strata-cluster-tls"),
            ("overlays/gpu+components/mtls", "Secret", "strata-api-keys"),
            ("overlays/gpu+components/mtls", "Secret", "strata-kv-hash-key"),
            ("overlays/gpu+components/mtls", "Secret", "strata-cluster-tls"),
            ("overlays/cpu-demo+components/https", "Secret", "strata-api-tls")}
# Overlays rendered with a component added, as an operator would add it to their overlay.
WITH_COMPONENT = [("overlays/gpu", "components/mtls"), ("overlays/cpu-demo", "components/https")]
# The workloads that serve or dial cluster gRPC, and so take the mTLS flags.
CLUSTER_GRPC_WORKLOADS = {"strata-router", "strata-prefill", "strata-decode", "strata-kvstore"}
TLS_FLAGS = {"tls-ca": "ca.crt", "tls-cert": "tls.crt", "tls-key": "tls.key"}


def render(kustomization):
  path = os.path.join(ARGS.source, "deploy", "k8s", kustomization)
  proc = subprocess.run([ARGS.kubectl, "kustomize", path], capture_output=True, text=True)
  if proc.returncode != 0:
    raise AssertionError(f"kubectl kustomize {path} failed:\n{proc.stderr}")
  return [o for o in yaml.safe_load_all(proc.stdout) if o]


def render_with_component(overlay, component):
  """`overlay` with `component` added, rendered from a scratch copy of deploy/k8s (kustomize
  takes neither absolute paths nor a root outside the tree)."""
  with tempfile.TemporaryDirectory() as tmp:
    tree = os.path.join(tmp, "k8s")
    shutil.copytree(os.path.join(ARGS.source, "deploy", "k8s"), tree)
    root = os.path.join(tree, "overlays", "with-component")
    os.makedirs(root)
    with open(os.path.join(root, "kustomization.yaml"), "w") as f:
      f.write("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
              f"resources:\n  - ../../{overlay}\ncomponents:\n  - ../../{component}\n")
    proc = subprocess.run([ARGS.kubectl, "kustomize", root], capture_output=True, text=True)
    if proc.returncode != 0:
      raise AssertionError(f"kubectl kustomize {overlay} + {component} failed:\n{proc.stderr}")
    return [o for o in yaml.safe_load_all(proc.stdout) if o]


def pod_spec(obj):
  return obj["spec"]["template"]["spec"]


def containers(obj):
  spec = pod_spec(obj)
  return spec.get("initContainers", []) + spec["containers"]


def name_of(obj):
  return f'{obj["kind"]}/{obj["metadata"]["name"]}'


# --- lint: each returns a list of problems --------------------------------------------------------

def lint_container(obj, c):
  where = f'{name_of(obj)} container {c["name"]}'
  problems = []
  image = c.get("image", "")
  if not re.fullmatch(r"[^:@\s]+(:[\w][\w.-]*|@sha256:[0-9a-f]{64})", image.split("/")[-1]) or \
      image.endswith(":latest"):
    problems.append(f"{where}: image {image!r} has no pinned tag")
  for probe in ("livenessProbe", "readinessProbe"):
    if probe not in c:
      problems.append(f"{where}: no {probe}")
  res = c.get("resources", {})
  for kind in ("requests", "limits"):
    for r in ("cpu", "memory"):
      if r not in res.get(kind, {}):
        problems.append(f"{where}: no {kind}.{r}")
  pod_sc = pod_spec(obj).get("securityContext", {})
  sc = c.get("securityContext", {})
  if not (sc.get("runAsNonRoot") or pod_sc.get("runAsNonRoot")):
    problems.append(f"{where}: not runAsNonRoot")
  if sc.get("runAsUser", pod_sc.get("runAsUser")) == 0:
    problems.append(f"{where}: runAsUser 0")
  if sc.get("readOnlyRootFilesystem") is not True:
    problems.append(f"{where}: root filesystem not read-only")
  if sc.get("allowPrivilegeEscalation") is not False:
    problems.append(f"{where}: allowPrivilegeEscalation not false")
  if sc.get("privileged"):
    problems.append(f"{where}: privileged")
  caps = sc.get("capabilities", {})
  if "ALL" not in caps.get("drop", []) or caps.get("add"):
    problems.append(f"{where}: capabilities not dropped (drop: [ALL], no add)")
  return problems


def defined_env(c, objects):
  names = {e["name"] for e in c.get("env", [])}
  for src in c.get("envFrom", []):
    ref = src.get("configMapRef") or src.get("secretRef")
    kind = "ConfigMap" if "configMapRef" in src else "Secret"
    for o in objects:
      if o["kind"] == kind and o["metadata"]["name"] == ref["name"]:
        names.update(o.get("data", {}).keys())
  return names


def lint_args(obj, c, objects):
  problems = []
  defined = defined_env(c, objects)
  for arg in c.get("command", []) + c.get("args", []):
    for var in re.findall(r"\$\((\w+)\)", arg):
      if var not in defined:
        problems.append(f'{name_of(obj)}: {arg!r} uses $({var}), which is not defined')
  return problems


def flag(c, name):
  for arg in c.get("args", []):
    if arg.startswith(f"--{name}="):
      return arg.split("=", 1)[1]
  return None


def lint_termination(obj):
  problems = []
  spec = pod_spec(obj)
  grace = spec.get("terminationGracePeriodSeconds", 30)
  for c in spec["containers"]:
    drain = float(flag(c, "drain-seconds") or 10)
    pre = c.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", [])
    sleep = float(pre[1]) if len(pre) == 2 and pre[0] == "sleep" else 0
    if not pre:
      problems.append(f"{name_of(obj)}: no preStop hook")
    if grace <= drain + sleep:
      problems.append(f"{name_of(obj)}: terminationGracePeriodSeconds {grace} <= preStop "
                      f"{sleep} s + --drain-seconds {drain}")
  return problems


def lint_worker(obj):
  """Workers and kvstore daemons must listen on and advertise an address other pods reach: the
  pod IP."""
  problems = []
  for c in pod_spec(obj)["containers"]:
    env = {e["name"]: e for e in c.get("env", [])}
    pod_ip = env.get("POD_IP", {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
    if flag(c, "host") != "$(POD_IP)" or pod_ip != "status.podIP":
      problems.append(f"{name_of(obj)}: worker must run with --host=$(POD_IP) from status.podIP")
    if not (flag(c, "router-service") or "").startswith("strata-router-registry."):
      problems.append(f"{name_of(obj)}: worker must register with every router behind "
                      "strata-router-registry (--router-service)")
  return problems


def lint_kv_remote(obj, objects):
  """A worker with a remote KV tier finds its daemons through the router
  (--kv-remote-from-router): a fixed --kv-remote list would have to follow every change of the
  kvstore StatefulSet's replicas, and pod IPs change with restarts. So there must be one kvstore
  StatefulSet, and its daemons must register with the router (lint_worker checks the address
  they advertise)."""
  problems = []
  stores = [o for o in objects if o["kind"] == "StatefulSet" and
            o["spec"]["template"]["metadata"]["labels"].get("app.kubernetes.io/component") ==
            "kvstore"]
  for c in pod_spec(obj)["containers"]:
    args = c.get("args", [])
    if any(a.startswith("--kv-remote=") or a == "--kv-remote" for a in args):
      problems.append(f"{name_of(obj)}: a fixed --kv-remote list; use --kv-remote-from-router")
    if "--kv-remote-from-router" not in args:
      continue
    if len(stores) != 1:
      problems.append(f"{name_of(obj)}: --kv-remote-from-router without one kvstore StatefulSet")
      continue
    for k in pod_spec(stores[0])["containers"]:
      if not (flag(k, "router-service") or "").startswith("strata-router-registry."):
        problems.append(f"{name_of(stores[0])}: kvstore daemons must register at "
                        "strata-router-registry, where the workers learn of them")
  return problems


def expanded_flag(c, name, objects):
  """The value of --name= with every $(VAR) replaced from the container's ConfigMaps; None
  without the flag."""
  value = flag(c, name)
  if value is None:
    return None
  env = {}
  for src in c.get("envFrom", []):
    ref = src.get("configMapRef")
    for o in objects:
      if ref and o["kind"] == "ConfigMap" and o["metadata"]["name"] == ref["name"]:
        env.update(o.get("data", {}))
  return re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), value)


def lint_kv_pool(obj, objects):
  """A worker's KV pool and device flags as `strata worker` accepts them: --gpu-memory-share in
  [0, 1], and when > 0 no --kv-cache-mb or --num-kv-blocks other than 0; --plugin-config a JSON
  object. A pod with a GPU limit has one GPU, which it sees as device 0."""
  problems = []
  for c in pod_spec(obj)["containers"]:
    where = f"{name_of(obj)} container {c['name']}"
    share = expanded_flag(c, "gpu-memory-share", objects) or "0"
    try:
      share = float(share)
    except ValueError:
      problems.append(f"{where}: --gpu-memory-share={share!r} is not a number")
      continue
    if not 0 <= share <= 1:
      problems.append(f"{where}: --gpu-memory-share={share} is not in [0, 1]")
    for other in ("kv-cache-mb", "num-kv-blocks"):
      if share > 0 and (expanded_flag(c, other, objects) or "0") != "0":
        problems.append(f"{where}: --gpu-memory-share and --{other} both size the KV pool")
    try:
      config = json.loads(expanded_flag(c, "plugin-config", objects) or "{}")
    except json.JSONDecodeError:
      config = None
    if not isinstance(config, dict):
      problems.append(f"{where}: --plugin-config is not a JSON object")
      continue
    gpus = c.get("resources", {}).get("limits", {}).get("nvidia.com/gpu")
    if gpus is not None and str(gpus) != "1":
      problems.append(f"{where}: nvidia.com/gpu {gpus}; a worker uses one GPU")
    if gpus is not None and config.get("device", 0) != 0:
      problems.append(f"{where}: plugin device {config['device']}, but the pod's GPU is device 0")
  return problems


def lint_router_ha(obj, objects):
  """No single router: at least two replicas, replaced one at a time (never Recreate), and a
  PodDisruptionBudget that keeps one of them up through voluntary disruptions."""
  problems = []
  if obj["spec"].get("replicas", 1) < 2:
    problems.append(f"{name_of(obj)}: fewer than 2 routers (a single point of failure)")
  if obj["spec"].get("strategy", {}).get("type") == "Recreate":
    problems.append(f"{name_of(obj)}: Recreate takes every router down at once")
  labels = obj["spec"]["template"]["metadata"]["labels"]
  pdbs = [p for p in objects if p["kind"] == "PodDisruptionBudget" and
          selects(p["spec"]["selector"]["matchLabels"], labels)]
  if not any(int(p["spec"].get("minAvailable", 0)) >= 1 for p in pdbs):
    problems.append(f"{name_of(obj)}: no PodDisruptionBudget keeps a router available")
  return problems


def selects(selector, labels):
  return all(labels.get(k) == v for k, v in selector.items())


def lint_objects(objects):
  problems = []
  workloads = [o for o in objects if o["kind"] in WORKLOAD_KINDS]
  for o in workloads:
    for c in containers(o):
      problems += lint_container(o, c) + lint_args(o, c, objects)
    problems += lint_termination(o)
    component = o["spec"]["template"]["metadata"]["labels"].get("app.kubernetes.io/component")
    if component in ("prefill", "decode", "kvstore"):
      problems += lint_worker(o)
    if component in ("prefill", "decode"):
      problems += lint_kv_remote(o, objects) + lint_kv_pool(o, objects)
    if component == "router":
      problems += lint_router_ha(o, objects)
    pod_labels = o["spec"]["template"]["metadata"]["labels"]
    if not any(p["kind"] == "PodDisruptionBudget" and
               selects(p["spec"]["selector"]["matchLabels"], pod_labels) for p in objects):
      problems.append(f"{name_of(o)}: no PodDisruptionBudget")
  for s in (o for o in objects if o["kind"] == "Service"):
    if not any(selects(s["spec"]["selector"], w["spec"]["template"]["metadata"]["labels"])
               for w in workloads):
      problems.append(f"{name_of(s)}: selects no pod")
  for h in (o for o in objects if o["kind"] == "HorizontalPodAutoscaler"):
    ref = h["spec"]["scaleTargetRef"]
    if not any(w["kind"] == ref["kind"] and w["metadata"]["name"] == ref["name"] for w in workloads):
      problems.append(f"{name_of(h)}: scales a missing {ref['kind']}/{ref['name']}")
  return problems


def lint_mtls(objects):
  """Every cluster gRPC workload passes the three --tls-* flags, each a file of a whole-Secret
  mount of strata-cluster-tls under cert-manager's key name (a subPath mount would never see a
  rotated Secret)."""
  problems = []
  for o in (o for o in objects if o["kind"] in WORKLOAD_KINDS):
    if o["metadata"]["name"] not in CLUSTER_GRPC_WORKLOADS:
      continue
    c = pod_spec(o)["containers"][0]
    volumes = {v["name"]: v for v in pod_spec(o).get("volumes", [])}
    for name, key in TLS_FLAGS.items():
      path = flag(c, name)
      if path is None:
        problems.append(f"{name_of(o)}: no --{name}")
        continue
      mount = next((m for m in c.get("volumeMounts", [])
                    if path == m["mountPath"].rstrip("/") + "/" + key), None)
      secret = volumes.get(mount["name"], {}).get("secret", {}) if mount else {}
      if mount is None or secret.get("secretName") != "strata-cluster-tls":
        problems.append(f"{name_of(o)}: --{name}={path} is not key {key} of a mount of Secret "
                        "strata-cluster-tls")
      elif "subPath" in mount or secret.get("items"):
        problems.append(f"{name_of(o)}: the strata-cluster-tls mount must be the whole Secret")
  return problems


def lint_https(objects):
  """The router passes --http-tls-cert and --http-tls-key, each a file of a whole-Secret mount of
  strata-api-tls, and probes over HTTPS (a plaintext probe of an HTTPS port gets 400)."""
  problems = []
  for o in (o for o in objects if o["kind"] in WORKLOAD_KINDS):
    if o["metadata"]["name"] != "strata-router":
      continue
    c = pod_spec(o)["containers"][0]
    volumes = {v["name"]: v for v in pod_spec(o).get("volumes", [])}
    for name, key in (("http-tls-cert", "tls.crt"), ("http-tls-key", "tls.key")):
      path = flag(c, name)
      mount = next((m for m in c.get("volumeMounts", [])
                    if path == m["mountPath"].rstrip("/") + "/" + key), None) if path else None
      secret = volumes.get(mount["name"], {}).get("secret", {}) if mount else {}
      if mount is None or secret.get("secretName") != "strata-api-tls":
        problems.append(f"{name_of(o)}: --{name}={path} is not key {key} of a mount of Secret "
                        "strata-api-tls")
      elif "subPath" in mount or secret.get("items"):
        problems.append(f"{name_of(o)}: the strata-api-tls mount must be the whole Secret")
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
      if c.get(probe, {}).get("httpGet", {}).get("scheme") != "HTTPS":
        problems.append(f"{name_of(o)}: {probe} is not over HTTPS")
  return problems


def lint_references(kustomization, objects):
  """ConfigMaps, Secrets and PVCs the pods use exist in the rendering (or are documented as
  created by the operator)."""
  problems = []
  have = {(o["kind"], o["metadata"]["name"]) for o in objects}
  for o in (o for o in objects if o["kind"] in WORKLOAD_KINDS):
    refs = []
    for c in containers(o):
      for src in c.get("envFrom", []):
        if "configMapRef" in src:
          refs.append(("ConfigMap", src["configMapRef"]["name"]))
      for e in c.get("env", []):
        vf = e.get("valueFrom", {})
        if "secretKeyRef" in vf:
          refs.append(("Secret", vf["secretKeyRef"]["name"]))
        if "configMapKeyRef" in vf:
          refs.append(("ConfigMap", vf["configMapKeyRef"]["name"]))
    for v in pod_spec(o).get("volumes", []):
      if "persistentVolumeClaim" in v:
        refs.append(("PersistentVolumeClaim", v["persistentVolumeClaim"]["claimName"]))
      if "secret" in v:
        refs.append(("Secret", v["secret"]["secretName"]))
    for ref in refs:
      if ref not in have and (kustomization, *ref) not in EXTERNAL:
        problems.append(f"{name_of(o)} uses missing {ref[0]}/{ref[1]}")
  return problems


# --- tests ----------------------------------------------------------------------------------------

class RenderAndValidate(unittest.TestCase):

  def test_every_object_is_valid_kubernetes(self):
    versions = sorted({kv_utils.major_minor(v) for v in kv_utils.all_versions()},
                      key=lambda v: tuple(map(int, v.split("."))))
    checked = 0
    for kustomization, objects in RENDERED.items():
      for obj in objects:
        if (obj["apiVersion"], obj["kind"]) in CRD_KINDS:
          continue
        for version in (versions[0], versions[-1]):
          with self.subTest(kustomization=kustomization, obj=name_of(obj), version=version):
            try:
              kubernetes_validate.validate(obj, version, strict=True)
            except kv_utils.ValidationError as e:
              self.fail(f"{kustomization}: {name_of(obj)} invalid for {version}: {e.message} "
                        f"at {list(e.path)}")
            checked += 1
    self.assertGreater(checked, 40)

  def test_only_known_custom_resources(self):
    builtin_groups = re.compile(r"^(v1|apps/v1|policy/v1|autoscaling/v2|networking\.k8s\.io/v1)$")
    for kustomization, objects in RENDERED.items():
      for obj in objects:
        if not builtin_groups.match(obj["apiVersion"]):
          self.assertIn((obj["apiVersion"], obj["kind"]), CRD_KINDS, f"{kustomization}: {obj}")

  def test_prometheusrule_is_the_rules_file(self):
    rule = next(o for o in RENDERED["monitoring"] if o["kind"] == "PrometheusRule")
    with open(os.path.join(ARGS.source, "deploy", "prometheus", "strata-rules.yaml")) as f:
      self.assertEqual(rule["spec"], yaml.safe_load(f))

  def test_servicemonitor_scrapes_the_services(self):
    monitor = next(o for o in RENDERED["monitoring"] if o["kind"] == "ServiceMonitor")
    services = [o for o in RENDERED["overlays/cpu-demo"] if o["kind"] == "Service"]
    selected = [s for s in services
                if selects(monitor["spec"]["selector"]["matchLabels"], s["metadata"]["labels"])]
    ports = {e["port"] for e in monitor["spec"]["endpoints"]}
    scraped = {s["metadata"]["name"] for s in selected
               if ports & {p["name"] for p in s["spec"]["ports"]}}
    # The job label is the Service name; the rules expect these jobs, and the kvstore's.
    self.assertEqual(scraped,
                     {"strata-router", "strata-prefill", "strata-decode", "strata-kvstore"})

  def test_dashboard_uses_recorded_series(self):
    with open(os.path.join(ARGS.source, "deploy", "prometheus", "strata-rules.yaml")) as f:
      recorded = {r["record"] for g in yaml.safe_load(f)["groups"] for r in g["rules"]
                  if "record" in r}
    cm = next(o for o in RENDERED["monitoring"] if o["kind"] == "ConfigMap")
    self.assertEqual(cm["metadata"]["labels"].get("grafana_dashboard"), "1")
    dashboard = json.loads(cm["data"]["strata-dashboard.json"])
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    self.assertGreaterEqual(len(exprs), 10)
    for expr in exprs:
      for name in re.findall(r"\b(?:strata|job|instance):[\w:]+", expr):
        self.assertIn(name, recorded, f"dashboard query {expr!r}")


class Lint(unittest.TestCase):

  def test_overlays_pass_the_lint(self):
    for kustomization in ("overlays/cpu-demo", "overlays/gpu", "overlays/cpu-demo-mtls",
                          "overlays/gpu+components/mtls", "overlays/cpu-demo+components/https"):
      if kustomization in NOT_RENDERED:
        continue
      objects = RENDERED[kustomization]
      problems = lint_objects(objects) + lint_references(kustomization, objects)
      self.assertEqual(problems, [], kustomization)

  def test_mtls_overlay_passes_certificates(self):
    if NOT_RENDERED:
      self.skipTest("; ".join(sorted(set(NOT_RENDERED.values()))))
    self.assertEqual(lint_mtls(RENDERED["overlays/cpu-demo-mtls"]), [])
    self.assertEqual(lint_mtls(RENDERED["overlays/gpu+components/mtls"]), [])
    # Without the component nothing has the flags; a mount of one key (subPath) is refused.
    self.assertEqual(len(lint_mtls(RENDERED["overlays/cpu-demo"])),
                     len(CLUSTER_GRPC_WORKLOADS) * len(TLS_FLAGS))
    objects = copy.deepcopy(RENDERED["overlays/cpu-demo-mtls"])
    router = next(o for o in objects if o["metadata"]["name"] == "strata-router"
                  and o["kind"] == "Deployment")
    c = pod_spec(router)["containers"][0]
    mount = next(m for m in c["volumeMounts"] if m["name"] == "cluster-tls")
    mount["subPath"] = "tls.crt"
    self.assertTrue(any("whole Secret" in p for p in lint_mtls(objects)))

  def test_https_component_serves_the_api_over_tls(self):
    if NOT_RENDERED:
      self.skipTest("; ".join(sorted(set(NOT_RENDERED.values()))))
    self.assertEqual(lint_https(RENDERED["overlays/cpu-demo+components/https"]), [])
    # Without the component: two flags and three probes missing; a subPath mount is refused.
    self.assertEqual(len(lint_https(RENDERED["overlays/cpu-demo"])), 5)
    objects = copy.deepcopy(RENDERED["overlays/cpu-demo+components/https"])
    router = next(o for o in objects if o["metadata"]["name"] == "strata-router"
                  and o["kind"] == "Deployment")
    c = pod_spec(router)["containers"][0]
    next(m for m in c["volumeMounts"] if m["name"] == "api-tls")["subPath"] = "tls.crt"
    self.assertTrue(any("whole Secret" in p for p in lint_https(objects)))
    # Only the router changes.
    for o in RENDERED["overlays/cpu-demo+components/https"]:
      if o["kind"] in WORKLOAD_KINDS and o["metadata"]["name"] != "strata-router":
        self.assertIsNone(flag(pod_spec(o)["containers"][0], "http-tls-cert"), name_of(o))

  def test_gpu_overlay_uses_gpus(self):
    objects = RENDERED["overlays/gpu"]
    config = next(o for o in objects if o["kind"] == "ConfigMap" and
                  o["metadata"]["name"].startswith("strata-config"))
    self.assertEqual(config["data"]["STRATA_PLUGIN"], "cuda")
    for o in objects:
      if o["kind"] == "Deployment" and o["metadata"]["name"] in ("strata-prefill", "strata-decode"):
        c = pod_spec(o)["containers"][0]
        self.assertEqual(str(c["resources"]["limits"].get("nvidia.com/gpu")), "1", name_of(o))
        # The pod's one GPU, a share of it for weights, activations and the KV pool.
        self.assertEqual(json.loads(expanded_flag(c, "plugin-config", objects)), {"device": 0})
        self.assertEqual(float(expanded_flag(c, "gpu-memory-share", objects)), 0.9, name_of(o))
        self.assertEqual(expanded_flag(c, "kv-cache-mb", objects), "0", name_of(o))
    hpa_metrics = {o["metadata"]["name"]: o["spec"]["metrics"][0]
                   for o in objects if o["kind"] == "HorizontalPodAutoscaler"}
    self.assertEqual(hpa_metrics["strata-prefill"]["pods"]["metric"]["name"],
                     "strata_worker_queued_prefill_tokens")
    self.assertEqual(hpa_metrics["strata-decode"]["pods"]["metric"]["name"],
                     "strata_worker_running_requests")

  def test_lint_rejects_broken_gpu_workers(self):
    base = RENDERED["overlays/gpu"]

    def broken(mutate):
      objects = copy.deepcopy(base)
      decode = next(o for o in objects if o["metadata"]["name"] == "strata-decode"
                    and o["kind"] == "Deployment")
      config = next(o for o in objects if o["kind"] == "ConfigMap" and
                    o["metadata"]["name"].startswith("strata-config"))
      mutate(pod_spec(decode)["containers"][0], config["data"])
      return lint_objects(objects)

    mutations = {
        "share above 1": lambda c, d: d.update(STRATA_GPU_MEMORY_SHARE="1.5"),
        "share not a number": lambda c, d: d.update(STRATA_GPU_MEMORY_SHARE="most"),
        "share and kv-cache-mb": lambda c, d: d.update(STRATA_KV_CACHE_MB="40960"),
        "share and num-kv-blocks": lambda c, d: c["args"].append("--num-kv-blocks=4096"),
        "device 1 in a one-GPU pod": lambda c, d: d.update(STRATA_PLUGIN_CONFIG='{"device":1}'),
        "plugin config not an object": lambda c, d: d.update(STRATA_PLUGIN_CONFIG="device=0"),
        "two GPUs": lambda c, d: c["resources"]["limits"].update({"nvidia.com/gpu": 2}),
    }
    self.assertEqual(broken(lambda c, d: None), [])
    for what, mutate in mutations.items():
      with self.subTest(what):
        self.assertNotEqual(broken(mutate), [], what)

  def test_cpu_demo_scales_on_cpu(self):
    for o in RENDERED["overlays/cpu-demo"]:
      if o["kind"] == "HorizontalPodAutoscaler":
        self.assertEqual(o["spec"]["metrics"][0]["resource"]["name"], "cpu")

  def test_network_policies_open_the_ports_the_pods_use(self):
    objects = RENDERED["overlays/cpu-demo"]
    policies = [o for o in objects if o["kind"] == "NetworkPolicy"]
    self.assertTrue(any(p["spec"]["podSelector"] == {} and "ingress" not in p["spec"]
                        for p in policies), "no default-deny policy")
    open_ports = {(p.get("port"), p.get("endPort")) for pol in policies
                  for rule in pol["spec"].get("ingress", []) for p in rule.get("ports", [])}
    config = next(o for o in objects if o["kind"] == "ConfigMap")
    lo, hi = map(int, config["data"]["UCX_TCP_PORT_RANGE"].split("-"))
    self.assertIn((lo, hi), open_ports, "the UCX port range must be open between workers")
    for o in objects:
      if o["kind"] in WORKLOAD_KINDS:
        for port in pod_spec(o)["containers"][0]["ports"]:  # by number, or by name
          self.assertTrue({(port["containerPort"], None), (port.get("name"), None)} & open_ports,
                          f"{name_of(o)} {port}")

  # The lint must catch what it claims to: break a good rendering one way at a time.
  def test_lint_rejects_broken_pods(self):
    base = RENDERED["overlays/cpu-demo"]

    def broken(mutate):
      objects = copy.deepcopy(base)
      decode = next(o for o in objects if o["metadata"]["name"] == "strata-decode"
                    and o["kind"] == "Deployment")
      mutate(decode, pod_spec(decode)["containers"][0], objects)
      return lint_objects(objects) + lint_references("overlays/cpu-demo", objects)

    mutations = {
        "no readinessProbe": lambda d, c, o: c.pop("readinessProbe"),
        "image :latest": lambda d, c, o: c.update(image="strata:latest"),
        "untagged image": lambda d, c, o: c.update(image="strata"),
        "no memory limit": lambda d, c, o: c["resources"]["limits"].pop("memory"),
        "writable root": lambda d, c, o: c["securityContext"].update(readOnlyRootFilesystem=False),
        "root user": lambda d, c, o: c["securityContext"].update(runAsUser=0),
        "capabilities kept": lambda d, c, o: c["securityContext"].pop("capabilities"),
        "escalation": lambda d, c, o: c["securityContext"].pop("allowPrivilegeEscalation"),
        "undefined arg var": lambda d, c, o: c["args"].append("--plugin=$(STRATA_PLUGN)"),
        "short grace": lambda d, c, o: pod_spec(d).update(terminationGracePeriodSeconds=20),
        "loopback host": lambda d, c, o: c["args"].__setitem__(
            c["args"].index("--host=$(POD_IP)"), "--host=127.0.0.1"),
        "no PDB": lambda d, c, o: o.remove(next(x for x in o if x["kind"] == "PodDisruptionBudget"
                                                and x["metadata"]["name"] == "strata-decode")),
        "missing secret": lambda d, c, o: o.remove(next(x for x in o if x["kind"] == "Secret")),
        "fixed kv-remote list": lambda d, c, o: c["args"].append(
            "--kv-remote=strata-kvstore-0.strata-kvstore.$(POD_NAMESPACE).svc:7400"),
        "kvstore unregistered": lambda d, c, o: (lambda k: k["args"].remove(next(
            a for a in k["args"] if a.startswith("--router-service="))))(pod_spec(next(
                x for x in o if x["kind"] == "StatefulSet"))["containers"][0]),
        "one router": lambda d, c, o: next(
            x for x in o if x["kind"] == "Deployment" and
            x["metadata"]["name"] == "strata-router")["spec"].update(replicas=1),
        "routers recreated": lambda d, c, o: next(
            x for x in o if x["kind"] == "Deployment" and
            x["metadata"]["name"] == "strata-router")["spec"].update(strategy={"type": "Recreate"}),
        "worker registers with one router": lambda d, c, o: c["args"].__setitem__(
            next(i for i, a in enumerate(c["args"]) if a.startswith("--router-service=")),
            "--router=strata-router-registry.$(POD_NAMESPACE).svc:8001"),
        "kvstore StatefulSet gone": lambda d, c, o: o.remove(next(
            x for x in o if x["kind"] == "StatefulSet")),
        "kvstore on loopback": lambda d, c, o: (lambda k: k["args"].__setitem__(
            k["args"].index("--host=$(POD_IP)"), "--host=127.0.0.1"))(pod_spec(next(
                x for x in o if x["kind"] == "StatefulSet"))["containers"][0]),
    }
    for what, mutate in mutations.items():
      with self.subTest(what):
        self.assertNotEqual(broken(mutate), [], what)


def main():
  global ARGS
  parser = argparse.ArgumentParser()
  parser.add_argument("--source", required=True)
  parser.add_argument("--kubectl", default=shutil.which("kubectl"))
  ARGS, rest = parser.parse_known_args()
  if not ARGS.kubectl or not os.path.exists(ARGS.kubectl):
    print("k8s_manifests_test: no kubectl (Debian: apt install kubernetes-client); skipped")
    sys.exit(77)
  jobs = [(k, lambda k=k: render(k)) for k in KUSTOMIZATIONS]
  jobs += [(f"{o}+{c}", lambda o=o, c=c: render_with_component(o, c)) for o, c in WITH_COMPONENT]
  for name, job in jobs:
    try:
      RENDERED[name] = job()
    except AssertionError as e:
      if name not in NEEDS_COMPONENTS or "omponent" not in str(e):
        raise
      NOT_RENDERED[name] = f"this kustomize has no Components (needs v3.7+): {e}"
  unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
  main()
