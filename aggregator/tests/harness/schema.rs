//! JSON Schema validation by Python's `jsonschema`, the reference
//! implementation (tests/run.sh installs it into `.tools/venv`): a
//! validator independent of FleetDP's code, and nothing more to compile
//! with the tests (docs/testing.md, "Running the suite").

use std::io::Write;
use std::process::{Command, Stdio};

/// Checks the schema against its metaschema, then each instance against
/// the schema (formats included), and prints one list of errors per
/// instance, each error with the path to the value at fault.
const VALIDATE: &str = r#"
import json, sys
from jsonschema import validators
doc = json.load(sys.stdin)
schema = doc["schema"]
cls = validators.validator_for(schema)
cls.check_schema(schema)
v = cls(schema, format_checker=cls.FORMAT_CHECKER)
out = [[f"/{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in v.iter_errors(i)]
       for i in doc["instances"]]
print(json.dumps(out))
"#;

/// Each instance's errors against `schema` (empty: valid), in order.
/// `None` without a Python that has `jsonschema`: the caller skips the
/// check, unless FLEETDP_REQUIRE_PYTHON_CLIENT is set (then this panics).
/// Panics if the schema itself is not a valid JSON Schema.
pub fn schema_errors(
    schema: &serde_json::Value,
    instances: &[serde_json::Value],
) -> Option<Vec<Vec<String>>> {
    let py = super::front::python_with("jsonschema")?;
    let mut child = Command::new(py)
        .args(["-c", VALIDATE])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start Python");
    let input = serde_json::json!({ "schema": schema, "instances": instances });
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "jsonschema: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let errors: Vec<Vec<String>> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(errors.len(), instances.len());
    Some(errors)
}
