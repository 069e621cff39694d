#!/usr/bin/env python3
"""Self-test of scripts/check-architecture-doc.py on a small made-up workspace:
a page naming only what exists passes; a missing path, type, module item,
method, task or configuration key, a task left out, and a count of lines
each fail.

    python3 scripts/test_check_architecture_doc.py
"""

import importlib.util
import os
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("checker", os.path.join(HERE, "check-architecture-doc.py"))
checker = importlib.util.module_from_spec(spec)
spec.loader.exec_module(checker)

FILES = {
    "Cargo.toml": '[workspace]\nmembers = ["engine", "router", "gateway"]\n',
    "engine/src/lib.rs": "pub mod config;\npub mod task;\npub mod schedule;\n",
    "engine/src/task.rs": "pub trait Task { fn name(&self) -> &'static str; }\n"
    "pub fn task_fn(name: &'static str) {}\n",
    "engine/src/config.rs": "pub const KEYS: &[Key] = &[\n    key(\"routing.mode\", ROUTER, Str, \"\"),\n"
    "    key(\"schedule.topics\", BOTH, Toml, \"\"),\n];\n",
    "engine/src/schedule.rs": "pub struct Scheduling;\n"
    "impl Task for Scheduling {\n    fn name(&self) -> &'static str {\n        \"scheduling\"\n    }\n}\n",
    "router/src/lib.rs": "pub mod server;\n",
    "router/src/server.rs": "pub fn run() {\n    Supervisor::new(c).into_task(\n        \"intake\", f);\n}\n"
    "#[cfg(test)]\nmod tests {\n    fn t() { task_fn(\"test-only\", f); }\n}\n",
    "gateway/src/lib.rs": "pub mod hub;\npub struct Gateway;\n"
    "impl Gateway {\n    pub fn serve() { task_fn(\"mailbox-expiry\", f); }\n}\n",
    "gateway/src/hub.rs": "pub struct Hub;\nimpl Hub {\n    pub fn deliver(&self) {}\n}\n"
    "pub enum Mode {\n    Standalone,\n    Edge { id: u8 },\n}\n",
}

GOOD = """# Architecture

The hub (`gateway/src/hub.rs`, in `gateway/src/`) takes `Hub::deliver` calls;
`Gateway::serve` and `router::server::run()` are the roots, `Scheduling` and
`hub::Mode::Edge` exist, [the page](architecture.md) too. `Arc` is std's.
With `routing.mode = "targeted"`, `schedule.topics.callback_url` and the
exchange `routing_x.edges` (no section of the table).

```
`not/checked.rs` inside a fence
```

| process | tasks |
|---|---|
| gateway | `mailbox-expiry`; `scheduling` (engine) |
| router | `intake`, with `[redis]` set |
"""


class CheckArchitectureDoc(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.root = self.dir.name
        for rel, text in FILES.items():
            path = os.path.join(self.root, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        os.makedirs(os.path.join(self.root, "docs"))
        self.doc = os.path.join(self.root, "docs", "architecture.md")

    def tearDown(self):
        self.dir.cleanup()

    def problems(self, text):
        with open(self.doc, "w", encoding="utf-8") as f:
            f.write(text)
        return checker.check(self.root, self.doc)

    def assertFails(self, text, *fragments):
        problems = self.problems(text)
        self.assertTrue(problems, "expected a problem")
        for fragment in fragments:
            self.assertTrue(any(fragment in p for p in problems), f"{fragment!r} not in {problems}")

    def test_a_page_naming_what_exists_passes(self):
        self.assertEqual(self.problems(GOOD), [])

    def test_a_missing_path_fails(self):
        self.assertFails(GOOD.replace("gateway/src/hub.rs", "gateway/src/hubs.rs"), "`gateway/src/hubs.rs` does not exist")
        self.assertFails(GOOD.replace("(architecture.md)", "(moved.md)"), "moved.md does not exist")

    def test_a_missing_type_or_item_fails(self):
        self.assertFails(GOOD.replace("`Scheduling`", "`Scheduler`"), "`Scheduler` is not defined")
        self.assertFails(GOOD.replace("Hub::deliver", "Hub::route"), "`Hub::route` is not defined")
        self.assertFails(GOOD.replace("hub::Mode::Edge", "hub::Mode::Root"), "`hub::Mode::Root` is not defined")
        self.assertFails(GOOD.replace("router::server::run()", "router::ingest::run()"), "`router::ingest::run()`")

    def test_a_task_missing_or_extra_fails(self):
        self.assertFails(GOOD.replace("`mailbox-expiry`; ", ""), "`mailbox-expiry` (gateway crate) is missing")
        self.assertFails(GOOD.replace("`scheduling` (engine)", "engine"), "`scheduling` (engine crate) is in no row")
        self.assertFails(GOOD.replace("`intake`", "`intake`, `test-only`"), "`test-only` in the router rows")
        # A binary's own task listed under the other binary.
        self.assertFails(
            GOOD.replace("| gateway | `mailbox-expiry`;", "| gateway | `intake`, `mailbox-expiry`;"),
            "`intake` in the gateway rows is no task of the gateway crate or a library (it is a task of the router crate)",
        )

    def test_a_missing_config_key_fails(self):
        self.assertFails(GOOD.replace("routing.mode", "routing.kind"), "configuration key `routing.kind` is in no row")

    def test_a_count_of_lines_fails(self):
        self.assertFails(GOOD + "\nNo file is over 600 lines.\n", "a claim in lines ('600 lines')")


if __name__ == "__main__":
    unittest.main()
