#!/usr/bin/env python3
"""A CycloneDX 1.5 SBOM (JSON) of what a Herald release ships.

    scripts/sbom.py [--out FILE]

Components:
- herald-gateway and herald-router (the binaries, in the .debs, tarballs
  and image) and every crate they link: the normal (not dev, not build)
  dependency graph of both packages for this machine's target
  (`cargo metadata --locked --filter-platform`), each with its purl
  (pkg:cargo/NAME@VERSION), its license expression as its Cargo.toml says,
  and the SHA-256 Cargo.lock records for registry crates;
- @herald/client (the npm tarball, gateway/js), from package.json; its
  package-lock lists devDependencies only (typescript, terser: the build's
  tools, not shipped), so it brings no component.

`dependencies` is the graph between them. Deterministic: the timestamp is
the commit's (git log -1), the serial number a UUID derived from the
commit and the document's content, components sorted. No network.
"""

import argparse
import datetime
import hashlib
import json
import subprocess
import sys
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ROOTS = ("herald-gateway", "herald-router")


def run(cmd):
    return subprocess.run(cmd, cwd=REPO, check=True, capture_output=True, text=True).stdout


def host_target():
    for line in run(["rustc", "-vV"]).splitlines():
        if line.startswith("host: "):
            return line.split(": ", 1)[1]
    raise SystemExit("sbom.py: rustc -vV names no host")


def lock_checksums():
    """(name, version) -> sha256 from Cargo.lock (registry crates only)."""
    import tomllib
    lock = tomllib.loads((REPO / "Cargo.lock").read_text())
    return {(p["name"], p["version"]): p["checksum"] for p in lock.get("package", []) if "checksum" in p}


def cargo_components():
    meta = json.loads(run(["cargo", "metadata", "--format-version", "1", "--locked",
                           "--filter-platform", host_target()]))
    packages = {p["id"]: p for p in meta["packages"]}
    nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}
    by_name = {p["name"]: p["id"] for p in meta["packages"] if p["source"] is None}
    sums = lock_checksums()

    def normal_deps(node_id):
        out = []
        for d in nodes[node_id]["deps"]:
            if any(k["kind"] is None for k in d["dep_kinds"]):
                out.append(d["pkg"])
        return sorted(set(out))

    seen, stack = set(), [by_name[r] for r in ROOTS]
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        stack.extend(normal_deps(pid))

    def ref(pid):
        p = packages[pid]
        return f"pkg:cargo/{p['name']}@{p['version']}"

    components, deps = [], []
    for pid in sorted(seen, key=lambda i: (packages[i]["name"], packages[i]["version"])):
        p = packages[pid]
        local = p["source"] is None
        c = {
            "type": "application" if p["name"] in ROOTS else "library",
            "bom-ref": ref(pid),
            "name": p["name"],
            "version": p["version"],
            "purl": ref(pid),
        }
        if p.get("description"):
            c["description"] = " ".join(p["description"].split())
        if p.get("license"):
            # Old crates write "MIT/Apache-2.0": SPDX says "MIT OR Apache-2.0".
            c["licenses"] = [{"expression": p["license"].replace("/", " OR ")}]
        elif p.get("license_file"):
            c["licenses"] = [{"license": {"name": f"see {p['license_file']}"}}]
        checksum = sums.get((p["name"], p["version"]))
        if checksum:
            c["hashes"] = [{"alg": "SHA-256", "content": checksum}]
        if not local and p.get("repository"):
            c["externalReferences"] = [{"type": "vcs", "url": p["repository"]}]
        if local:
            c["properties"] = [{"name": "herald:source", "value": "this repository"}]
        components.append(c)
        deps.append({"ref": ref(pid), "dependsOn": sorted({ref(d) for d in normal_deps(pid)})})
    return components, deps


def npm_component():
    pkg = json.loads((REPO / "gateway/js/package.json").read_text())
    lock = json.loads((REPO / "gateway/js/package-lock.json").read_text())
    shipped = [k for k, v in lock.get("packages", {}).items() if k and not v.get("dev")]
    if shipped:
        raise SystemExit(f"sbom.py: gateway/js ships npm dependencies {shipped}: list them here")
    name = pkg["name"]
    scope, _, short = name.partition("/")
    purl = f"pkg:npm/{scope.replace('@', '%40')}/{short}@{pkg['version']}"
    return {
        "type": "library",
        "bom-ref": purl,
        "name": short,
        "group": scope,
        "version": pkg["version"],
        "description": pkg.get("description", ""),
        "licenses": [{"expression": pkg["license"]}],
        "purl": purl,
        "properties": [{"name": "herald:source", "value": "this repository (gateway/js)"}],
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="write here (default: stdout)")
    args = ap.parse_args()
    commit = run(["git", "rev-parse", "HEAD"]).strip()
    when = int(run(["git", "log", "-1", "--format=%ct"]).strip())
    version = json.loads(run(["cargo", "metadata", "--format-version", "1", "--no-deps"]))
    version = next(p["version"] for p in version["packages"] if p["name"] == "herald-gateway")
    components, deps = cargo_components()
    client = npm_component()
    components.append(client)
    deps.append({"ref": client["bom-ref"], "dependsOn": []})
    herald = {
        "type": "application",
        "bom-ref": f"herald@{version}",
        "name": "herald",
        "version": version,
        "description": "Herald, a real-time notification gateway: herald-gateway, herald-router, @herald/client",
        "licenses": [{"expression": "Apache-2.0"}],
        "properties": [{"name": "herald:commit", "value": commit}],
    }
    deps.append({"ref": herald["bom-ref"],
                 "dependsOn": sorted([f"pkg:cargo/{r}@{version}" for r in ROOTS] + [client["bom-ref"]])})
    doc = {
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        "version": 1,
        "metadata": {
            "timestamp": datetime.datetime.fromtimestamp(when, datetime.timezone.utc)
            .strftime("%Y-%m-%dT%H:%M:%SZ"),
            "tools": {"components": [{"type": "application", "name": "scripts/sbom.py",
                                      "description": "Herald's SBOM from cargo metadata and package-lock.json"}]},
            "component": herald,
        },
        "components": components,
        "dependencies": sorted(deps, key=lambda d: d["ref"]),
    }
    body = json.dumps(doc, indent=2, sort_keys=False)
    serial = uuid.UUID(hashlib.sha256((commit + body).encode()).hexdigest()[:32], version=4)
    doc = {"bomFormat": doc["bomFormat"], "specVersion": doc["specVersion"],
           "serialNumber": f"urn:uuid:{serial}", **{k: v for k, v in doc.items()
                                                    if k not in ("bomFormat", "specVersion")}}
    text = json.dumps(doc, indent=2) + "\n"
    if args.out:
        Path(args.out).write_text(text)
        print(f"{args.out}: {len(components)} components")
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
