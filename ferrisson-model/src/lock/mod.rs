//! The reentrant lock's protocol (also the fenced lock's, and with
//! replicas): the crate's first model, whose types the crate root
//! re-exports.

use std::fmt;

use stateright::{Model, Property};

use crate::{ClientId, Latch, ReqId, Time};

mod bounds;
mod client;
mod model;
mod server;
mod steps;

pub use bounds::{Bounds, Mutation};
pub use client::*;
pub use model::counts_agree;
pub use server::*;
pub use steps::LockModel;
