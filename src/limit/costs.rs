//! What a request costs, and what its response says it really cost: the
//! cost functions of the per-request layers.

/// How much of a limit a request takes; see [`KeyedLimitLayer::cost`](super::KeyedLimitLayer::cost).
///
/// Implemented for closures `Fn(&Request) -> u32` and for [`UnitCost`].
///
/// ```
/// use tower_limits::limit::RequestCost;
///
/// // A batch costs one unit per call in it.
/// struct Batch { calls: Vec<&'static str> }
/// let per_call = |batch: &Batch| u32::try_from(batch.calls.len()).unwrap_or(u32::MAX);
/// assert_eq!(per_call.cost(&Batch { calls: vec!["a", "b", "c"] }), 3);
/// ```
pub trait RequestCost<Request> {
    /// The request's cost in the limit's units (tokens, starts, slots).
    fn cost(&self, request: &Request) -> u32;
}

impl<Request, F: Fn(&Request) -> u32> RequestCost<Request> for F {
    fn cost(&self, request: &Request) -> u32 {
        self(request)
    }
}

/// Every request costs one unit: the default of [`KeyedLimitLayer`](super::KeyedLimitLayer).
///
/// ```
/// use tower_limits::limit::{RequestCost, UnitCost};
///
/// assert_eq!(UnitCost.cost(&"any request"), 1);
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct UnitCost;

impl<Request> RequestCost<Request> for UnitCost {
    fn cost(&self, _request: &Request) -> u32 {
        1
    }
}

/// The real cost of a call, read from its response; see
/// [`KeyedLimitLayer::settle`](super::KeyedLimitLayer::settle).
///
/// Implemented for closures `Fn(&Response) -> Option<u32>` and for
/// [`KeepEstimate`].
///
/// ```
/// use tower_limits::limit::ResponseCost;
///
/// // The reply says how many tokens the call really used, when it knows.
/// struct Reply { tokens_used: Option<u32> }
/// let used = |reply: &Reply| reply.tokens_used;
/// assert_eq!(used.cost(&Reply { tokens_used: Some(120) }), Some(120));
/// assert_eq!(used.cost(&Reply { tokens_used: None }), None); // keep the estimate
/// ```
pub trait ResponseCost<Response> {
    /// The call's real cost, if the response tells it.
    fn cost(&self, response: &Response) -> Option<u32>;
}

impl<Response, F: Fn(&Response) -> Option<u32>> ResponseCost<Response> for F {
    fn cost(&self, response: &Response) -> Option<u32> {
        self(response)
    }
}

/// Keeps the cost charged at admission: the default of the per-request
/// layers.
///
/// ```
/// use tower_limits::limit::{KeepEstimate, ResponseCost};
///
/// assert_eq!(KeepEstimate.cost(&"any response"), None);
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct KeepEstimate;

impl<Response> ResponseCost<Response> for KeepEstimate {
    fn cost(&self, _response: &Response) -> Option<u32> {
        None
    }
}
