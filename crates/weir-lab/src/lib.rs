//! Test and bench harness for weir: network namespaces, real peer programs, process accounting.
