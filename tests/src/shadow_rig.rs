//! The host the shadow-policy tests run: three item actions over a real HTTP upstream on
//! 127.0.0.1:0 and a real SQLite journal file, an enforced policy that allows every call,
//! and a candidate in shadow that would deny `delete_item`. The executor test
//! (`tests/tests/integration/shadow.rs`) checks the records it writes; the CLI test
//! (`sallyport-cli/tests/integration/cli_policy.rs`) runs `sallyport policy shadow-report`
//! on the same journal.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use sallyport_core::journal::{Journal, SqliteJournal};
use sallyport_core::outcome::ActionResult;
use sallyport_core::policy::{CallCounts, Policy, PolicyDecision, PolicyRequest};
use sallyport_core::{Action, Catalog, Executor, Session};
use sallyport_http::HttpChannel;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::http_server::{Reply, Upstream};

/// Read one item.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "get_item", effect = observe)]
#[http(get = "/items/{item_id}", result = Item)]
struct GetItem {
    #[scope(item)]
    item_id: String,
}

/// Rename one item.
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "update_item", effect = reversible_change, consent = none)]
#[http(put = "/items/{item_id}", result = Item)]
struct UpdateItem {
    #[scope(item)]
    item_id: String,
    title: String,
}

/// Move one item to the trash (it can be restored for 30 days).
#[derive(Action, Deserialize, Serialize, JsonSchema)]
#[action(name = "delete_item", effect = reversible_change, consent = none)]
#[http(delete = "/items/{item_id}", result = Item)]
struct DeleteItem {
    #[scope(item)]
    item_id: String,
}

/// What the upstream answers.
#[derive(Deserialize, Serialize, JsonSchema)]
struct Item {
    id: String,
}

/// What a policy saw of one call: the action, its counts and how many recent calls.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    /// The session.
    pub session: String,
    /// The action.
    pub action: String,
    /// This action's counts in the session.
    pub calls: CallCounts,
    /// How many recent calls of the session it was shown.
    pub recent: usize,
}

/// How a [`Recording`] policy decides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rule {
    /// Allows every call (rule `anyone`).
    AllowAll,
    /// Denies `delete_item` (rule `no-delete`), allows the rest (rule `anyone`).
    NoDeletes,
    /// Denies `update_item` (rule `freeze`), allows the rest (rule `anyone`).
    NoUpdates,
    /// Panics on every call.
    Panics,
}

/// A policy that decides by its [`Rule`] and remembers what it saw.
#[derive(Debug)]
pub struct Recording {
    name: &'static str,
    rule: Rule,
    seen: Mutex<Vec<Seen>>,
}

impl Recording {
    /// A policy named `name` that decides by `rule`.
    pub fn new(name: &'static str, rule: Rule) -> Arc<Self> {
        Arc::new(Self {
            name,
            rule,
            seen: Mutex::new(Vec::new()),
        })
    }

    /// What it saw, in order.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

impl Policy for Recording {
    fn name(&self) -> &str {
        self.name
    }

    fn decide(&self, request: &PolicyRequest<'_>) -> PolicyDecision {
        self.seen.lock().unwrap().push(Seen {
            session: request.session.id().to_string(),
            action: request.action.to_owned(),
            calls: request.calls,
            recent: request.session_calls.recent.len(),
        });
        match (self.rule, request.action) {
            (Rule::Panics, _) => panic!("the candidate fell over on {}", request.action),
            (Rule::NoDeletes, "delete_item") => {
                PolicyDecision::deny("items are never deleted").with_rule("no-delete")
            }
            (Rule::NoUpdates, "update_item") => {
                PolicyDecision::deny("items are frozen").with_rule("freeze")
            }
            _ => PolicyDecision::allow().with_rule("anyone"),
        }
    }
}

/// The rig's catalog: `get_item`, `update_item`, `delete_item` (for a Cedar policy's schema).
pub fn catalog() -> Catalog {
    Catalog::builder()
        .action::<GetItem>()
        .action::<UpdateItem>()
        .action::<DeleteItem>()
        .build()
        .expect("catalog")
}

/// The executor, its upstream and its journal file.
pub struct ShadowRig {
    /// The upstream, counting requests.
    pub upstream: Upstream,
    /// The executor.
    pub executor: Executor,
    /// The SQLite journal file (absent when the rig was started on another journal).
    pub journal: PathBuf,
    _dir: tempfile::TempDir,
}

impl std::fmt::Debug for ShadowRig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShadowRig")
            .field("journal", &self.journal)
            .finish_non_exhaustive()
    }
}

impl ShadowRig {
    /// An executor enforcing `enforced`, with `candidate` in shadow when given; the policy's
    /// call counts in the journal's shared store, or in memory with `local_counts`.
    pub async fn start(
        enforced: Arc<Recording>,
        candidate: Option<Arc<dyn Policy>>,
        local_counts: bool,
    ) -> Self {
        Self::start_on(None, enforced, candidate, local_counts).await
    }

    /// [`ShadowRig::start`] on `journal` (a PostgreSQL journal, say) instead of a SQLite
    /// file, when given.
    pub async fn start_on(
        journal: Option<Arc<dyn Journal>>,
        enforced: Arc<Recording>,
        candidate: Option<Arc<dyn Policy>>,
        local_counts: bool,
    ) -> Self {
        let upstream = Upstream::start(|received| {
            let id = received
                .path
                .rsplit('/')
                .next()
                .unwrap_or_default()
                .to_owned();
            Reply::Json(200, json!({ "id": id }))
        })
        .await;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("journal.db");
        let journal: Arc<dyn Journal> = match journal {
            Some(journal) => journal,
            None => Arc::new(SqliteJournal::open(&path).expect("journal")),
        };
        let mut builder = Executor::builder(catalog())
            .journal_arc(journal)
            .channel(
                HttpChannel::builder()
                    .base_url(upstream.url())
                    .build()
                    .expect("channel"),
            )
            .policy_arc(enforced);
        if let Some(candidate) = candidate {
            builder = builder.shadow_policy_arc(None, candidate);
        }
        if local_counts {
            builder = builder.local_call_counts();
        }
        Self {
            upstream,
            executor: builder.build().expect("executor"),
            journal: path,
            _dir: dir,
        }
    }

    /// The script: in session `s1` get, update and delete `it_1`, get and delete `it_2`; in
    /// session `s2` get and delete `it_3`. Seven calls, three of them deletes. Returns each
    /// call's action and result.
    pub async fn run_script(&self) -> Vec<(&'static str, ActionResult)> {
        let script: [(&str, &str, Value); 7] = [
            ("s1", "get_item", json!({"item_id": "it_1"})),
            (
                "s1",
                "update_item",
                json!({"item_id": "it_1", "title": "Q3"}),
            ),
            ("s1", "delete_item", json!({"item_id": "it_1"})),
            ("s1", "get_item", json!({"item_id": "it_2"})),
            ("s1", "delete_item", json!({"item_id": "it_2"})),
            ("s2", "get_item", json!({"item_id": "it_3"})),
            ("s2", "delete_item", json!({"item_id": "it_3"})),
        ];
        let mut results = Vec::new();
        for (session, action, arguments) in script {
            let session = Session::new(session).allow("item", ["it_1", "it_2", "it_3"]);
            let result = self.executor.call(action, arguments, &session).await;
            let action: &'static str = match action {
                "get_item" => "get_item",
                "update_item" => "update_item",
                _ => "delete_item",
            };
            results.push((action, result));
        }
        results
    }
}
