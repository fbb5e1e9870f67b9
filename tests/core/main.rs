//! Tests of the windowed attention core (issue: the workspace, the windowed attention core,
//! and CI). One binary, since every test binary links Burn.

mod cases;
mod common;

mod blocked;
mod flex;
mod gpu;
mod kernel;
mod linear;
mod masked;
mod property;
mod reference;
mod rope;
mod schedule;
mod spec;
