//! Local Service Discovery (BEP 14).
