//! The service's clients of outside systems, with no FleetDP logic in
//! them: Kafka (client settings, topics, reading and producing with
//! retries, error kinds), how Kafka's partitioners place device ids, and
//! the Schema Registry (Avro writers' schemas by id). Everything above
//! reaches Kafka through `kafka`.

pub mod kafka;
pub(crate) mod names;
pub(crate) mod partitioner;
pub mod schemas;
