//! Agent configuration files (HCL, HCL1 forms, JSON).
