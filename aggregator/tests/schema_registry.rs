//! Framed Avro input whose writers' schemas come from a Schema Registry
//! (`[input] schema_registry_url`), over the broker. No Confluent-compatible
//! registry installs here (Karapace is not on PyPI), so the registry is a
//! small HTTP server speaking its `GET /schemas/ids/{id}` answer: an Avro
//! schema for id 42, a Protobuf one for 43, 404 for the rest. The registry
//! starts only after the service: the service waits for it (nothing is
//! dead-lettered for the outage), fetches id 42 once for every message that
//! names it, and dead-letters the messages naming the other ids with why —
//! including an answer over the 1 MiB bound (id 44), a definite answer held
//! as a refusal: it used to be retried forever as "unreachable", and no
//! message behind it was released.

use crate::harness;

use harness::*;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const STREAMS: &str =
    "[[stream]]\nname = \"temp\"\nlower = -20.0\nupper = 60.0\nresolution = 0.1\n\
    window_size = 10\nmax_windows_per_device = 10\nbudget_share = 0.5\nstatistics = [\"count\", \"mean\"]\n\n\
    [[stream]]\nname = \"battery\"\nlower = 10.0\nupper = 15.0\nresolution = 0.01\n\
    window_size = 5\nmax_windows_per_device = 10\nbudget_share = 0.5\nstatistics = [\"count\", \"mean\"]";

/// The registry: serves `schemas` (a JSON object id → answer) on `port`,
/// printing each requested path.
const REGISTRY: &str = r#"
import http.server, json, sys
port, answers = int(sys.argv[1]), json.loads(sys.argv[2])
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        print(self.path, flush=True)
        key = self.path.rsplit("/", 1)[-1]
        if self.path == "/schemas/ids/44":
            # Over the 1 MiB a registry answer may be.
            body, code = b'{"schema": "' + b'x' * (2 << 20) + b'"}', 200
        elif self.path.startswith("/schemas/ids/") and key in answers:
            body, code = json.dumps(answers[key]).encode(), 200
        else:
            body, code = b'{"error_code": 40403, "message": "Schema not found"}', 404
        self.send_response(code)
        self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
        if self.path != "/schemas/ids/44":  # read to the end: the bound applies while reading
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
"#;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The registry's process, stopped when dropped (also when a test fails).
struct Registry(Child);

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_registry(port: u16) -> Registry {
    let answers = serde_json::json!({
        "42": { "schema": ingest::EXAMPLE_AVRO_SCHEMA },
        "43": { "schema": "syntax = \"proto3\";", "schemaType": "PROTOBUF" },
    });
    Registry(
        Command::new("python3")
            .args(["-c", REGISTRY, &port.to_string(), &answers.to_string()])
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 runs the test registry"),
    )
}

#[test]
fn framed_avro_schemas_are_fetched_once_from_the_registry() {
    let broker = Broker::start();
    let rt = runtime();
    rt.block_on(async {
        let t = Topics::created(&broker, "registry-avro", 1).await;
        let port = free_port();
        let text = config_text(
            &broker,
            &t,
            "epsilon_per_device = 50.0\nhorizon = \"24h\"",
            &format!(
                "[input]\ndevice_id = \"vin\"\nevent_time = \"ts\"\nschema_registry_url = \"http://127.0.0.1:{port}\"\n\
                 [input.streams]\ntemp = \"cabin.temp_c\"\nbattery = \"battery_v\""
            ),
            STREAMS,
        )
        .replace(
            "[kafka]\n",
            "[kafka]\ninput_format = \"avro\"\ninput_framing = \"confluent\"\nread_content_type = false\n",
        );
        let v = fleetdp::config::Config::parse(&text)
            .unwrap()
            .validate()
            .unwrap();
        let at = now_ms() - 60_000;
        let out = framed_out;
        let mut msgs: Vec<Out> = (0..10)
            .map(|i| {
                let vin = format!("VIN{i}");
                let body = ingest::example_avro(&vin, at + i, Some(20.0 + i as f64), 12.0);
                out(&vin, ingest::frame(42, None, &body))
            })
            .collect();
        let body = ingest::example_avro("VINX", at, Some(1.0), 12.0);
        msgs.push(out("protobuf-id", ingest::frame(43, None, &body)));
        msgs.push(out("unknown-id", ingest::frame(99, None, &body)));
        msgs.push(out("unknown-again", ingest::frame(99, None, &body)));
        // Oversize answers, then good messages behind them.
        msgs.insert(0, out("oversize", ingest::frame(44, None, &body)));
        msgs.insert(5, out("oversize-again", ingest::frame(44, None, &body)));
        produce(&broker, &t.input, &msgs).await;
        // The service starts first and waits for the registry.
        let (stop, c, h) = spawn_pipeline(v, [8; 32]);
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(count(&c.windows_released), 0, "nothing before the registry answers");
        assert_eq!(c.dead_letters_total(), 0, "an unreachable registry dead-letters nothing");
        let mut registry = start_registry(port);
        let released = wait_until(Duration::from_secs(120), || {
            count(&c.windows_released) >= 3 && c.dead_letters_total() >= 5
        })
        .await;
        stop.send(true).unwrap();
        h.await.unwrap().unwrap();
        registry.0.kill().unwrap();
        let requests: Vec<String> = BufReader::new(registry.0.stdout.take().unwrap())
            .lines()
            .map_while(Result::ok)
            .collect();
        assert!(released, "released {}", count(&c.windows_released));
        assert_eq!(count(&c.readings_accepted), 20);
        // Each id once, however many messages name it.
        let mut sorted = requests.clone();
        sorted.sort();
        assert_eq!(
            sorted,
            [
                "/schemas/ids/42",
                "/schemas/ids/43",
                "/schemas/ids/44",
                "/schemas/ids/99"
            ],
            "{requests:?}"
        );
        let details = dead_letter_details(&broker, &t.dlq);
        assert_eq!(details.len(), 5, "{details:?}");
        assert_eq!(
            details.iter().filter(|d| d.contains("schema id 44") && d.contains("larger than")).count(),
            2,
            "{details:?}"
        );
        assert!(details.iter().any(|d| d.contains("schema id 43") && d.contains("PROTOBUF")), "{details:?}");
        assert_eq!(
            details.iter().filter(|d| d.contains("schema id 99") && d.contains("not found")).count(),
            2,
            "{details:?}"
        );
    });
}
