#!/usr/bin/env python3
"""Check a SARIF document the way a code-scanning upload would.

usage: validate_sarif.py SCHEMA DOCUMENT

Validates DOCUMENT against SCHEMA (the OASIS SARIF 2.1.0 JSON schema,
draft-04) with jsonschema (Debian's python3-jsonschema), then checks what
the schema cannot say and GitHub's upload requires: every result has a
location, a uriBaseId goes with a relative uri only, and every ruleIndex
names the rule its ruleId names. Exit status 0 when valid, 1 with the
problems on stderr, 2 when jsonschema is missing.
"""
import json
import sys

try:
    import jsonschema
except ImportError:
    print("no jsonschema module: install python3-jsonschema (tools/setup.sh does)", file=sys.stderr)
    sys.exit(2)


def artifact_locations(value):
    """Every artifactLocation object anywhere in the document."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "artifactLocation":
                yield item
            yield from artifact_locations(item)
    elif isinstance(value, list):
        for item in value:
            yield from artifact_locations(item)


def problems(doc):
    for run in doc.get("runs", []):
        rules = run.get("tool", {}).get("driver", {}).get("rules", [])
        for i, result in enumerate(run.get("results", [])):
            if not result.get("locations"):
                yield f"result {i} ({result.get('ruleId')}) has no location"
            index = result.get("ruleIndex")
            if index is not None and (index >= len(rules) or rules[index].get("id") != result.get("ruleId")):
                yield f"result {i}: ruleIndex {index} is not rule {result.get('ruleId')}"
    for loc in artifact_locations(doc):
        uri = loc.get("uri", "")
        if "uriBaseId" in loc and ":" in uri.split("/")[0]:
            yield f"artifactLocation {uri} is absolute and has a uriBaseId"
        if "uriBaseId" not in loc and not uri.startswith("file:///"):
            yield f"artifactLocation {uri} is relative without a uriBaseId"


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    with open(sys.argv[1], encoding="utf-8") as f:
        schema = json.load(f)
    with open(sys.argv[2], encoding="utf-8") as f:
        doc = json.load(f)
    errors = [f"schema: {e.message} at {'/'.join(str(p) for p in e.absolute_path)}"
              for e in jsonschema.Draft4Validator(schema).iter_errors(doc)]
    errors += list(problems(doc))
    for e in errors[:20]:
        print(e, file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
