#!/usr/bin/env bash
# Checks the deployment files without a container engine or a cluster:
#
# * every YAML file under deploy/ lints clean (yamllint, deploy/.yamllint.yaml);
# * the compose file, alone and with each override, is accepted by docker-compose and by the
#   compose specification's JSON schema (vendored in check-jsonschema, nothing is downloaded);
# * the Dockerfile names files and binaries that exist;
# * the Kubernetes manifests render with kustomize and validate strictly against the Kubernetes
#   1.32 schemas (kubernetes-validate); `kubectl apply --dry-run=client` runs only when a cluster
#   answers, since it needs the API server's discovery;
# * the ConfigMaps hold exactly examples/system/config/*.yaml;
# * the Debezium connector is valid JSON and names the outbox table, topic and oncebox headers that
#   the orders service uses.
#
# Installs what it lacks (Debian's docker-compose and yamllint; check-jsonschema and
# kubernetes-validate, every package pinned in deploy/validate-requirements.txt, in a virtualenv
# under ~/.cache), runs every check, prints one line per check
# and exits non-zero if any failed. Run from anywhere: bash deploy/validate.sh
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
started=$(date +%s)

tools="${ONCEBOX_DEPLOY_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/oncebox-deploy-tools}"
k8s_version=1.32.0
passed=0
failed=0
log="$(mktemp -t oncebox-validate.XXXXXX)"
trap 'rm -f "$log" "$log".*' EXIT

# Runs a check, printing PASS or FAIL with its output on failure.
check() {
    local name=$1
    shift
    if "$@" >"$log" 2>&1; then
        echo "PASS $name"
        passed=$((passed + 1))
    else
        echo "FAIL $name"
        sed 's/^/    /' "$log"
        failed=$((failed + 1))
    fi
}

echo "== tools"
missing_debs=()
command -v docker-compose >/dev/null 2>&1 || missing_debs+=(docker-compose)
command -v yamllint >/dev/null 2>&1 || missing_debs+=(yamllint)
if [ "${#missing_debs[@]}" -gt 0 ]; then
    echo "installing ${missing_debs[*]} (Debian packages)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing_debs[@]}" >/dev/null
fi
if ! cmp -s deploy/validate-requirements.txt "$tools/requirements.txt"; then
    echo "installing check-jsonschema and kubernetes-validate (deploy/validate-requirements.txt) into $tools"
    rm -rf "$tools"
    python3 -m venv "$tools" && "$tools/bin/pip" install -q -r deploy/validate-requirements.txt &&
        cp deploy/validate-requirements.txt "$tools/requirements.txt"
fi
for tool in docker-compose yamllint "$tools/bin/check-jsonschema" "$tools/bin/kubernetes-validate"; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "FAIL: $tool is not available" >&2
        exit 2
    fi
done
py="$tools/bin/python"

echo "== YAML"
check "yamllint deploy/" yamllint -s -c deploy/.yamllint.yaml deploy/

echo "== compose"
compose_sets=(
    "deploy/compose.yaml"
    "deploy/compose.yaml deploy/compose.rabbitmq.yaml"
    "deploy/compose.yaml deploy/compose.mysql.yaml"
    "deploy/compose.yaml deploy/compose.rabbitmq.yaml deploy/compose.mysql.yaml"
    "deploy/compose.yaml deploy/compose.debezium.yaml"
)
for set in "${compose_sets[@]}"; do
    args=()
    for file in $set; do args+=(-f "$file"); done
    check "docker-compose ${args[*]} config -q" docker-compose "${args[@]}" config -q
done
check "traffic-generator only under the traffic profile" "$py" - <<'EOF'
import subprocess, yaml
merged = subprocess.run(["docker-compose", "-f", "deploy/compose.yaml", "config"],
                        check=True, capture_output=True, text=True).stdout
services = yaml.safe_load(merged)["services"]
assert services["traffic-generator"].get("profiles") == ["traffic"], services["traffic-generator"]
for name, service in services.items():
    if name != "traffic-generator":
        assert not service.get("profiles"), f"{name} has a profile"
EOF
check "compose-spec JSON schema" "$tools/bin/check-jsonschema" --builtin-schema vendor.compose-spec \
    deploy/compose.yaml deploy/compose.rabbitmq.yaml deploy/compose.mysql.yaml deploy/compose.debezium.yaml

echo "== Dockerfile"
check "Dockerfile builds a package and binaries that exist" "$py" - <<'EOF'
import pathlib, re
dockerfile = pathlib.Path("deploy/Dockerfile").read_text()
package = re.search(r"-p (\S+) --bins", dockerfile).group(1)
cargo = pathlib.Path("examples/system/Cargo.toml").read_text()
assert f'name = "{package}"' in cargo, f"examples/system/Cargo.toml is not package {package}"
for binary in ("orders-service", "billing-service", "traffic-generator"):
    assert f"target/release/{binary}" in dockerfile, f"the Dockerfile does not copy {binary}"
    assert pathlib.Path(f"examples/system/src/bin/{binary}.rs").exists(), f"no binary {binary}"
assert list(pathlib.Path("examples/system/config").glob("*.yaml")), "no examples/system/config/*.yaml"
assert pathlib.Path("Cargo.lock").exists(), "--locked needs Cargo.lock"
ignored = pathlib.Path(".dockerignore").read_text().split()
for entry in ("target/", "node_modules/", ".git/"):
    assert entry in ignored, f".dockerignore lacks {entry}"
EOF

echo "== Kubernetes"
rendered="$log.rendered.yaml"
if command -v kubectl >/dev/null 2>&1; then
    check "kubectl kustomize deploy/k8s" kubectl kustomize deploy/k8s --output "$rendered"
else
    echo "kubectl not found: validating the kustomization's resources one by one"
    check "resources listed in kustomization.yaml" env RENDERED="$rendered" "$py" - <<'EOF'
import os, pathlib, yaml
root = pathlib.Path("deploy/k8s")
names = yaml.safe_load((root / "kustomization.yaml").read_text())["resources"]
pathlib.Path(os.environ["RENDERED"]).write_text("\n---\n".join((root / n).read_text() for n in names))
EOF
fi
check "the rendered kustomization holds every resource" env RENDERED="$rendered" "$py" - <<'EOF'
import collections, os, yaml
docs = [d for d in yaml.safe_load_all(open(os.environ["RENDERED"])) if d]
kinds = collections.Counter(d["kind"] for d in docs)
assert kinds == {"Namespace": 1, "ConfigMap": 2, "Secret": 1, "Deployment": 2, "Service": 2}, kinds
assert all(d["metadata"].get("namespace", "oncebox-example") == "oncebox-example" for d in docs)
EOF
check "kubernetes-validate --strict (Kubernetes $k8s_version): kustomize output" \
    "$tools/bin/kubernetes-validate" --strict --quiet -k "$k8s_version" "$rendered"
job="$log.job.yaml"
sed 's/^  generateName: traffic-generator-$/  name: traffic-generator-validate/' \
    deploy/k8s/traffic-generator-job.yaml > "$job"
check "kubernetes-validate --strict (Kubernetes $k8s_version): traffic-generator Job" \
    "$tools/bin/kubernetes-validate" --strict --quiet -k "$k8s_version" "$job"
check "ServiceMonitor selects the services' http ports" "$py" - <<'EOF'
import yaml
monitor = yaml.safe_load(open("deploy/k8s/servicemonitor.yaml"))
assert monitor["apiVersion"] == "monitoring.coreos.com/v1" and monitor["kind"] == "ServiceMonitor"
names = set(monitor["spec"]["selector"]["matchExpressions"][0]["values"])
assert names == {"orders-service", "billing-service"}, names
assert [e["port"] for e in monitor["spec"]["endpoints"]] == ["http"]
for file in ("orders-service", "billing-service"):
    docs = list(yaml.safe_load_all(open(f"deploy/k8s/{file}.yaml")))
    service = next(d for d in docs if d["kind"] == "Service")
    assert service["metadata"]["labels"]["app.kubernetes.io/name"] == file
    assert [p["name"] for p in service["spec"]["ports"]] == ["http"]
EOF
check "ConfigMaps equal examples/system/config/*.yaml" "$py" - <<'EOF'
import pathlib, yaml
maps = {d["metadata"]["name"]: d["data"] for d in yaml.safe_load_all(open("deploy/k8s/configmaps.yaml")) if d}
for name, service in (("orders", "orders-service"), ("billing", "billing-service")):
    source = pathlib.Path(f"examples/system/config/{name}.yaml").read_text()
    copy = maps[f"{service}-config"][f"{name}.yaml"]
    assert copy.rstrip("\n") == source.rstrip("\n"), f"deploy/k8s/configmaps.yaml {name}.yaml differs from examples/system/config/{name}.yaml"
EOF
if command -v kubectl >/dev/null 2>&1 && kubectl version --request-timeout=5s >/dev/null 2>&1; then
    check "kubectl apply --dry-run=client -k deploy/k8s" \
        kubectl apply --dry-run=client --validate=false -k deploy/k8s -o name
else
    echo "SKIP kubectl apply --dry-run=client -k deploy/k8s: no cluster answers (it needs the API server's discovery)"
fi

echo "== Debezium"
check "python3 -m json.tool deploy/debezium/shop-outbox-connector.json" \
    python3 -m json.tool deploy/debezium/shop-outbox-connector.json
check "connector matches orders.yaml and the oncebox headers" "$py" - <<'EOF'
import json, pathlib, re, yaml
config = json.load(open("deploy/debezium/shop-outbox-connector.json"))["config"]
orders = yaml.safe_load(open("examples/system/config/orders.yaml"))["oncebox"]
table = f"public.{orders['tables']['prefix']}outbox_events"
assert config["table.include.list"] == table, (config["table.include.list"], table)
assert table in pathlib.Path("deploy/debezium/setup.sql").read_text(), "setup.sql names another table"
topics = {event["topic"] for event in orders["outbox"]["events"].values()}
assert topics == {config["transforms.outbox.route.topic.replacement"]}, topics
placement = dict(
    (column, alias) for column, where, alias in
    (entry.split(":") for entry in config["transforms.outbox.table.fields.additional.placement"].split(","))
    if where == "header"
)
core = pathlib.Path("crates/oncebox-core/src/event.rs").read_text()
for column, constant in (("id", "HEADER_EVENT_ID"), ("event_type", "HEADER_EVENT_TYPE"), ("payload_type", "HEADER_PAYLOAD_TYPE")):
    header = re.search(rf'pub const {constant}: &str = "([^"]+)"', core).group(1)
    assert placement.get(column) == header, f"{column} must be placed as header {header}"
migration = pathlib.Path("migrations/postgres/0001_outbox_events.sql").read_text()
for key in ("table.field.event.id", "table.field.event.key", "table.field.event.payload", "route.by.field"):
    column = config[f"transforms.outbox.{key}"]
    assert re.search(rf"^\s+{column}\s", migration, re.M), f"{key}: no column {column} in the outbox table"
assert config["snapshot.mode"] == "no_data" and config["tombstones.on.delete"] == "false"
EOF

echo "== monitoring"
check "Prometheus scrapes both services, Grafana provisions a default Prometheus" "$py" - <<'EOF'
import json, yaml
prometheus = yaml.safe_load(open("deploy/prometheus/prometheus.yml"))
targets = {t for job in prometheus["scrape_configs"] for c in job["static_configs"] for t in c["targets"]}
assert targets == {"orders-service:8080", "billing-service:8081"}, targets
sources = yaml.safe_load(open("deploy/grafana/provisioning/datasources/prometheus.yaml"))["datasources"]
assert [s["type"] for s in sources if s.get("isDefault")] == ["prometheus"]
dashboard = json.load(open("deploy/grafana/oncebox.json"))
variables = {v["name"]: v for v in dashboard["templating"]["list"]}
assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
EOF

elapsed=$(($(date +%s) - started))
echo "deploy/validate.sh took ${elapsed}s"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
