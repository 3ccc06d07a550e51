pub mod fleetdp {}
