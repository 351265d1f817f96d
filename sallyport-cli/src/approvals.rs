//! `sallyport approvals …`: calls parked for a human's approval (see
//! [`sallyport_core::approval`]).
//!
//! Every text the journal holds is shown through [`escape`]: the agent wrote the note, the
//! objects and the arguments inside the request, and none of it may move the cursor, add a
//! line or reverse what a reader sees. JSON output is ASCII only (see [`ascii_json`]).

use std::fmt::Write as _;
use std::sync::Arc;

use sallyport_core::EffectClass;
use sallyport_core::Executor;
use sallyport_core::action::Externality;
use sallyport_core::approval::{
    self, Approval, ApprovalFilter, ApprovalId, ApprovalState, Decided, Decider, DecisionPolicy,
    RememberChoice, RememberedApproval, RememberedId, Revoked, Verdict,
};
use sallyport_core::consent::escape;
use sallyport_core::journal::{ApprovalStore, JournalError};
use sallyport_core::outcome::ActionResult;

use crate::args::{ApprovalsCommand, ApproverArgs, Cli, RememberArg, StateArg};
use crate::exit::{Exit, Failure};

/// The front end's name in every decision this command records.
const CHANNEL: &str = "cli";

/// What `approvals resume` says in the plain binary.
pub(crate) const RESUME_NEEDS_EXECUTOR: &str = "`approvals resume` needs the application's \
actions, which the plain `sallyport` binary does not have, so it sends nothing. The application \
that parked the calls resumes approved calls itself when it starts \
(`Executor::resume_approvals`); to resume them from a command line, run `approvals resume` \
through the application's own command (`sallyport_cli::run_with_executor`).";

pub(crate) fn run(
    cli: &Cli,
    cmd: &ApprovalsCommand,
    executor: Option<&Executor>,
) -> Result<(), Failure> {
    if matches!(cmd, ApprovalsCommand::Resume { .. }) && executor.is_none() {
        return Err(Failure::new(Exit::Usage, RESUME_NEEDS_EXECUTOR));
    }
    if let ApprovalsCommand::DeadLetters { file, json } = cmd {
        return dead_letters(file, *json);
    }
    let rt = crate::audit::runtime()?;
    let journal: Arc<dyn ApprovalStore> = match executor {
        Some(executor) => executor
            .approval_store()
            .cloned()
            .ok_or(JournalError::Unsupported("approvals"))?,
        None => crate::audit::open_approval_store(cli, &rt)?,
    };
    let journal = journal.as_ref();
    match cmd {
        ApprovalsCommand::List(args) => {
            let states: Vec<ApprovalState> = args.state.iter().map(|s| state_of(*s)).collect();
            let list = rt.block_on(journal.approvals(&ApprovalFilter::states(states.clone())))?;
            if args.json {
                println!("{}", ascii_json(&list)?);
            } else {
                print!("{}", table(&list, &states, sallyport_core::clock::now_ms()));
            }
            Ok(())
        }
        ApprovalsCommand::Show { id, json } => {
            let id = ApprovalId::from_stored(id.as_str());
            let Some(found) = rt.block_on(journal.approval(&id))? else {
                return Err(approval::ApprovalError::NotFound(id).into());
            };
            if *json {
                println!("{}", ascii_json(&found)?);
            } else {
                print!("{}", card(&found, sallyport_core::clock::now_ms()));
            }
            Ok(())
        }
        ApprovalsCommand::Approve(args) if args.remember.is_some() => {
            let id = ApprovalId::from_stored(args.id.as_str());
            let choice = match args.remember {
                Some(RememberArg::Session) => RememberChoice::Session,
                Some(RememberArg::Window(d)) => RememberChoice::Window(d),
                _ => RememberChoice::ExactArguments,
            };
            let outcome = rt.block_on(remember(
                journal,
                executor,
                &id,
                &args.approver,
                args.reason.as_deref(),
                choice,
            ))?;
            report(&outcome.decided, executor.is_some())?;
            match &outcome.remembered {
                Some(r) => {
                    println!("{}", remembered_line(r));
                    Ok(())
                }
                None => Err(Failure::new(
                    Exit::Failure,
                    "the approval was recorded but nothing was remembered",
                )),
            }
        }
        ApprovalsCommand::Remembered { action, json } => {
            let list = rt.block_on(journal.remembered_approvals(action.as_deref()))?;
            if *json {
                println!("{}", ascii_json(&list)?);
            } else if list.is_empty() {
                println!("no remembered approvals");
            } else {
                let now = sallyport_core::clock::now_ms();
                for r in &list {
                    println!(
                        "{}  {}  {}  {}  by {}  until {}",
                        escape(r.remembered_id.as_str()),
                        r.standing(now),
                        escape(&r.action),
                        escape(&r.scope.describe()),
                        approver_text(&r.created_by),
                        r.expires_at()
                    );
                }
            }
            Ok(())
        }
        ApprovalsCommand::Revoke { id, by } => {
            let id = RememberedId::from_stored(id.as_str());
            let revoker = Decider::new(by.clone().unwrap_or_else(default_by), CHANNEL);
            match rt.block_on(approval::revoke_remembered(journal, &id, &revoker))? {
                Revoked::Applied(r) => {
                    println!(
                        "revoked {}: later calls of {} are asked again (recorded by {})",
                        escape(r.remembered_id.as_str()),
                        escape(&r.action),
                        escape(&revoker.by)
                    );
                    Ok(())
                }
                Revoked::Unchanged(r) => Err(Failure::new(
                    Exit::AlreadyDecided,
                    format!(
                        "remembered approval {} was already revoked{}; nothing changed",
                        escape(r.remembered_id.as_str()),
                        r.revoked.as_ref().map_or_else(String::new, |v| format!(
                            " by {} at {}",
                            escape(&v.by.by),
                            sallyport_core::clock::rfc3339(v.at_ms)
                        ))
                    ),
                )),
                Revoked::NotFound => Err(Failure::new(
                    Exit::NotFound,
                    format!(
                        "no remembered approval `{}` in this journal",
                        escape(id.as_str())
                    ),
                )),
            }
        }
        ApprovalsCommand::Approve(args) => {
            let id = ApprovalId::from_stored(args.id.as_str());
            let decided = rt.block_on(decide(
                journal,
                executor,
                &id,
                Verdict::Approve,
                &args.approver,
                args.reason.as_deref(),
            ))?;
            report(&decided, executor.is_some())
        }
        ApprovalsCommand::Deny(args) => {
            let id = ApprovalId::from_stored(args.id.as_str());
            let decided = rt.block_on(decide(
                journal,
                executor,
                &id,
                Verdict::Deny,
                &args.approver,
                Some(&args.reason),
            ))?;
            report(&decided, executor.is_some())
        }
        ApprovalsCommand::Verify { id, public_key } => {
            let id = ApprovalId::from_stored(id.as_str());
            let Some(found) = rt.block_on(journal.approval(&id))? else {
                return Err(approval::ApprovalError::NotFound(id).into());
            };
            let expected = public_key
                .as_deref()
                .map(crate::signing::public_key)
                .transpose()?;
            crate::signing::verify(&found, expected.as_deref())
        }
        ApprovalsCommand::Keygen { file } => crate::signing::keygen(file),
        // Answered above, before a journal is opened.
        ApprovalsCommand::DeadLetters { file, json } => dead_letters(file, *json),
        ApprovalsCommand::Resume { json } => {
            let Some(executor) = executor else {
                return Err(Failure::new(Exit::Usage, RESUME_NEEDS_EXECUTOR));
            };
            let results = rt.block_on(executor.resume_approvals())?;
            if *json {
                println!("{}", ascii_json(&results)?);
            } else if results.is_empty() {
                println!("no approved calls waiting to be sent");
            } else {
                for result in &results {
                    println!("{}", result_line(result));
                }
                println!("resumed {} approved calls", results.len());
            }
            Ok(())
        }
    }
}

/// `approvals dead-letters`: the notifications no try delivered, one line each.
fn dead_letters(file: &std::path::Path, json: bool) -> Result<(), Failure> {
    let letters = sallyport_core::approval::notify::DeadLetter::read_all(file).map_err(|e| {
        Failure::new(
            Exit::Failure,
            format!("cannot read the dead-letter file {}: {e}", file.display()),
        )
    })?;
    if json {
        println!("{}", ascii_json(&letters)?);
        return Ok(());
    }
    if letters.is_empty() {
        println!("no undelivered notifications");
        return Ok(());
    }
    for letter in &letters {
        println!(
            "{}  {}  {}  {}  {} tries  {}",
            sallyport_core::clock::rfc3339(letter.at_ms),
            escape(&letter.approval_id),
            escape(&letter.action),
            escape(&letter.url),
            letter.attempts,
            escape(&letter.last_error)
        );
    }
    println!("{} undelivered notifications", letters.len());
    Ok(())
}

/// The approver these options name: the subject (`--by`, else the OS user), display name,
/// groups, and the signature over `verdict` on `approval` when `--key` is given.
fn approver(
    args: &ApproverArgs,
    approval: &Approval,
    verdict: Verdict,
) -> Result<Decider, Failure> {
    let mut decider = Decider::new(args.by.clone().unwrap_or_else(default_by), CHANNEL)
        .with_groups(args.groups.iter().cloned());
    if let Some(name) = &args.name {
        decider = decider.with_name(name.as_str());
    }
    if let Some(path) = &args.key {
        let signature = crate::signing::sign(path, &decider, approval, verdict)?;
        decider = decider.with_signature(signature);
    }
    Ok(decider)
}

/// Decides under the decision policy in effect (`--decision-policy`, else the executor's):
/// through the executor when there is one (which then also sends an approved call), else
/// through the library's one path, which records the decision only.
async fn decide(
    journal: &dyn ApprovalStore,
    executor: Option<&Executor>,
    id: &ApprovalId,
    verdict: Verdict,
    args: &ApproverArgs,
    reason: Option<&str>,
) -> Result<Decided, Failure> {
    let Some(current) = journal.approval(id).await? else {
        return Err(approval::ApprovalError::NotFound(id.clone()).into());
    };
    let decider = approver(args, &current, verdict)?;
    let file_policy = match &args.decision_policy {
        Some(path) => Some(
            sallyport_cedar::CedarDecisionPolicy::from_file(path)
                .map_err(|e| Failure::new(Exit::Usage, crate::exit::chain(&e)))?,
        ),
        None => None,
    };
    let decided = match (executor, &file_policy) {
        (Some(executor), None) => executor.decide(id, verdict, &decider, reason).await?,
        (executor, _) => {
            let policy: Option<&dyn DecisionPolicy> = match &file_policy {
                Some(p) => Some(p),
                None => None,
            };
            let decided =
                approval::decide_under(journal, policy, id, verdict, &decider, reason).await?;
            match executor {
                Some(executor) if matches!(&decided, Decided::Recorded(a) if a.state == ApprovalState::Approved) =>
                {
                    let _ = executor.resume_approval(id).await;
                    match journal.approval(id).await? {
                        Some(now) => Decided::Recorded(now),
                        None => decided,
                    }
                }
                _ => decided,
            }
        }
    };
    Ok(decided)
}

/// Approves and remembers under the decision policy in effect (`--decision-policy`, else
/// the executor's); with an executor, an approved call is then sent at once.
async fn remember(
    journal: &dyn ApprovalStore,
    executor: Option<&Executor>,
    id: &ApprovalId,
    args: &ApproverArgs,
    reason: Option<&str>,
    choice: RememberChoice,
) -> Result<approval::RememberOutcome, Failure> {
    let Some(current) = journal.approval(id).await? else {
        return Err(approval::ApprovalError::NotFound(id.clone()).into());
    };
    let decider = approver(args, &current, Verdict::Approve)?;
    let file_policy = match &args.decision_policy {
        Some(path) => Some(
            sallyport_cedar::CedarDecisionPolicy::from_file(path)
                .map_err(|e| Failure::new(Exit::Usage, crate::exit::chain(&e)))?,
        ),
        None => None,
    };
    let policy: Option<&dyn DecisionPolicy> = match (&file_policy, executor) {
        (Some(p), _) => Some(p),
        (None, Some(executor)) => executor.decision_policy().map(|p| p.as_ref()),
        (None, None) => None,
    };
    let mut outcome =
        match approval::remember_under(journal, policy, id, &decider, reason, choice).await {
            Err(approval::ApprovalError::NotRememberable(why)) => {
                return Err(Failure::new(
                    Exit::Refused,
                    format!(
                        "approval {}: not remembered and not decided: {}",
                        escape(id.as_str()),
                        escape(&why.to_string())
                    ),
                ));
            }
            other => other?,
        };
    if let (Some(executor), Decided::Recorded(a)) = (executor, &outcome.decided)
        && a.state == ApprovalState::Approved
    {
        let _ = executor.resume_approval(id).await;
        if let Some(now) = journal.approval(id).await? {
            outcome.decided = Decided::Recorded(now);
        }
    }
    Ok(outcome)
}

/// A remembered approval on one line, for the approver who made it.
fn remembered_line(r: &RememberedApproval) -> String {
    format!(
        "remembered {}: later calls of {} ({}) go out without asking while its definition is          unchanged, until {} or `approvals revoke {}`",
        escape(r.remembered_id.as_str()),
        escape(&r.action),
        escape(&r.scope.describe()),
        r.expires_at(),
        escape(r.remembered_id.as_str())
    )
}

/// `$USER` (`USERNAME` on Windows), else `cli`.
fn default_by() -> String {
    ["USER", "USERNAME"]
        .into_iter()
        .filter_map(|name| std::env::var(name).ok())
        .find(|v| !v.trim().is_empty())
        .unwrap_or_else(|| CHANNEL.to_owned())
}

fn state_of(arg: StateArg) -> ApprovalState {
    match arg {
        StateArg::Awaiting => ApprovalState::Awaiting,
        StateArg::Approved => ApprovalState::Approved,
        StateArg::Denied => ApprovalState::Denied,
        StateArg::Expired => ApprovalState::Expired,
        StateArg::Executing => ApprovalState::Executing,
        StateArg::Finished => ApprovalState::Finished,
    }
}

/// What a decision command prints (recorded) or fails with (already decided, expired).
fn report(decided: &Decided, with_executor: bool) -> Result<(), Failure> {
    match decided {
        Decided::Recorded(a) => {
            println!("{}", recorded(a, with_executor));
            Ok(())
        }
        Decided::Expired(a) => Err(Failure::new(
            Exit::Expired,
            format!(
                "approval {} expired at {} before anyone decided; the expiry is recorded now and \
                 nothing will be sent",
                escape(a.approval_id.as_str()),
                a.expires_at()
            ),
        )),
        Decided::AlreadyDecided(a) if a.state == ApprovalState::Expired => Err(Failure::new(
            Exit::Expired,
            format!(
                "approval {} expired at {} before anyone decided; nothing changed and nothing \
                 will be sent",
                escape(a.approval_id.as_str()),
                a.expires_at()
            ),
        )),
        Decided::AlreadyDecided(a) => Err(Failure::new(
            Exit::AlreadyDecided,
            format!(
                "approval {} was already {}; nothing changed",
                escape(a.approval_id.as_str()),
                standing(a)
            ),
        )),
        Decided::AlreadyCounted(a) => Err(Failure::new(
            Exit::AlreadyDecided,
            format!(
                "approval {}: your approval was already counted ({} of {}); the same approver \
                 counts once, nothing changed",
                escape(a.approval_id.as_str()),
                a.approval_count(),
                a.required_approvals
            ),
        )),
        Decided::Refused {
            approval, reason, ..
        } => Err(Failure::new(
            Exit::Refused,
            format!(
                "approval {}: refused: {}",
                escape(approval.approval_id.as_str()),
                escape(reason)
            ),
        )),
        _ => Err(Failure::new(
            Exit::Failure,
            "the journal answered the decision in a way this build does not know",
        )),
    }
}

/// The line for a decision this command recorded.
fn recorded(a: &Approval, with_executor: bool) -> String {
    let id = escape(a.approval_id.as_str());
    let by = a.decision.as_ref().map_or_else(String::new, |d| {
        format!(
            " by {} via {}",
            escape(&d.decider.by),
            escape(&d.decider.channel)
        )
    });
    match a.state {
        ApprovalState::Denied => {
            let reason = a
                .decision
                .as_ref()
                .and_then(|d| d.reason.as_deref())
                .map_or_else(String::new, |r| {
                    format!("; the agent is told: \"{}\"", escape(r))
                });
            format!("denied {id}: recorded{by}; nothing will be sent{reason}")
        }
        ApprovalState::Finished => {
            let result = a
                .result
                .as_ref()
                .map_or_else(|| "finished".to_owned(), result_line);
            format!("approved {id}: recorded{by}; carried out: {result}")
        }
        ApprovalState::Executing => {
            format!("approved {id}: recorded{by}; being sent (see `approvals show {id}`)")
        }
        ApprovalState::Awaiting => {
            let last = a.approvals.last().map_or_else(String::new, |d| {
                format!(
                    " by {} via {}",
                    escape(&d.decider.by),
                    escape(&d.decider.channel)
                )
            });
            let count = a.approval_count();
            format!(
                "approved {id}: counted{last}, {count} of {} approvals; waiting for {} more \
                 distinct approver(s) before anything is sent",
                a.required_approvals,
                a.required_approvals.saturating_sub(count)
            )
        }
        _ if with_executor => format!(
            "approved {id}: recorded{by}; not sent here (another executor holds the call, or \
             this application does not carry it out); it is sent when an application holding \
             the action resumes approved calls"
        ),
        _ => format!(
            "approved {id}: recorded{by}; nothing is sent yet: the application that parked the \
             call sends it when it resumes approved calls (when it starts, or through its own \
             `approvals resume`)"
        ),
    }
}

/// An approver on one line: subject, name, groups, front end, key id, whether signed (all
/// escaped).
fn approver_text(d: &Decider) -> String {
    let mut text = escape(&d.by).into_owned();
    if let Some(name) = &d.name {
        let _ = write!(text, " ({})", escape(name));
    }
    let _ = write!(text, " via {}", escape(&d.channel));
    if !d.groups.is_empty() {
        let groups: Vec<String> = d.groups.iter().map(|g| escape(g).into_owned()).collect();
        let _ = write!(text, ", groups {}", groups.join(", "));
    }
    if let Some(key) = &d.key_id {
        let _ = write!(text, ", key {}", escape(key));
    }
    if d.signature.is_some() {
        text.push_str(", signed (see `approvals verify`)");
    }
    text
}

/// What stands for an approval someone else decided: `approved by bob via webhook at …`.
fn standing(a: &Approval) -> String {
    let mut text = match &a.decision {
        Some(d) => {
            let verb = match d.verdict {
                Verdict::Approve => "approved",
                Verdict::Deny => "denied",
            };
            format!(
                "{verb} by {} via {} at {}",
                escape(&d.decider.by),
                escape(&d.decider.channel),
                sallyport_core::clock::rfc3339(d.at_ms)
            )
        }
        None => a.state.as_str().to_owned(),
    };
    match a.state {
        ApprovalState::Executing => text.push_str(" (being sent)"),
        ApprovalState::Finished => {
            let _ = write!(
                text,
                " (carried out: {})",
                a.result
                    .as_ref()
                    .map_or_else(|| "finished".to_owned(), result_line)
            );
        }
        _ => {}
    }
    text
}

/// One result on one line: status, code, reason, receipt (all escaped).
fn result_line(r: &ActionResult) -> String {
    let mut text = format!("{} {}", escape(&r.action), r.status);
    if let Some(code) = r.code_str() {
        let _ = write!(text, " ({})", escape(code));
    }
    if let Some(reason) = &r.reason {
        let _ = write!(text, " — {}", escape(reason));
    }
    match &r.receipt_id {
        Some(receipt) => {
            let _ = write!(text, ", receipt {}", escape(receipt.as_str()));
        }
        None => text.push_str(", no receipt"),
    }
    text
}

/// `expires in 23h 59m`, `expired`, or `-` once decided.
fn countdown(a: &Approval, now_ms: u64) -> String {
    match a.state {
        ApprovalState::Awaiting if a.is_expired_at(now_ms) => "expired".to_owned(),
        ApprovalState::Awaiting if a.expires_at_ms == approval::NEVER_EXPIRES => {
            "never expires".to_owned()
        }
        ApprovalState::Awaiting => format!("expires in {}", span(a.expires_at_ms - now_ms)),
        ApprovalState::Expired => "expired".to_owned(),
        _ => "-".to_owned(),
    }
}

/// A positive span of milliseconds as `23h 59m` (minutes rounded down), `under 1m` below a
/// minute.
fn span(ms: u64) -> String {
    let minutes = ms / 60_000;
    if minutes == 0 {
        return "under 1m".to_owned();
    }
    format!("{}h {}m", minutes / 60, minutes % 60)
}

/// The objects as `kind=value, …`, escaped; `-` when none.
fn objects_short(a: &Approval) -> String {
    if a.objects.is_empty() {
        return "-".to_owned();
    }
    a.objects
        .iter()
        .map(|o| format!("{}={}", escape(&o.kind), escape(&o.value)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `approvals list`: a header and one line per approval, or a sentence when there is none.
fn table(list: &[Approval], states: &[ApprovalState], now_ms: u64) -> String {
    if list.is_empty() {
        return if states.is_empty() {
            "no approvals\n".to_owned()
        } else {
            let names: Vec<&str> = states.iter().map(|s| s.as_str()).collect();
            format!("no approvals in state {}\n", names.join(" or "))
        };
    }
    let mut out = format!(
        "{:<36}  {:<9}  {:<24}  {:<21}  {:<24}  {:<16}  EXPIRY\n",
        "ID", "STATE", "ACTION", "EFFECT", "OBJECTS", "SESSION"
    );
    for a in list {
        let _ = writeln!(
            out,
            "{:<36}  {:<9}  {:<24}  {:<21}  {:<24}  {:<16}  {}",
            escape(a.approval_id.as_str()),
            a.state.as_str(),
            escape(&a.action),
            a.effect.as_str(),
            objects_short(a),
            escape(a.session.id().as_str()),
            countdown(a, now_ms)
        );
    }
    out
}

/// The effect class in words.
fn effect_words(effect: EffectClass) -> &'static str {
    match effect {
        EffectClass::Observe => "observe: a bounded read; no state changes",
        EffectClass::ReversibleChange => {
            "reversible change: a change with a documented, practical undo"
        }
        EffectClass::ExternalCommitment => {
            "external commitment: sends, pays, publishes or changes what customers see"
        }
        EffectClass::IrreversibleOrBroad => {
            "irreversible or broad: permanent deletion, access or permission changes, or many \
             objects at once"
        }
    }
}

/// The externality in words.
fn externality_words(externality: Externality) -> &'static str {
    match externality {
        Externality::Internal => "internal (visible only inside the organisation)",
        Externality::External => "external (visible to customers, partners or the public)",
    }
}

/// `approvals show`: the action card, one labelled line per fact, every stored text escaped.
fn card(a: &Approval, now_ms: u64) -> String {
    let mut out = String::new();
    let mut line = |label: &str, value: &str| {
        let _ = writeln!(out, "{label:<12}{value}");
    };
    line("approval", &escape(a.approval_id.as_str()));
    line(
        "action",
        &format!("{} — {}", escape(&a.action), escape(&a.summary)),
    );
    line("effect", effect_words(a.effect));
    line("reach", externality_words(a.externality));
    if !a.data_classes.is_empty() {
        let classes: Vec<String> = a
            .data_classes
            .iter()
            .map(|c| escape(c.as_str()).into_owned())
            .collect();
        line("data", &classes.join(", "));
    }
    line(
        "consent",
        &format!("{} (the action's rule)", a.rule.as_str()),
    );
    if a.objects.is_empty() {
        line("objects", "none");
    }
    for (i, o) in a.objects.iter().enumerate() {
        line(
            if i == 0 { "objects" } else { "" },
            &format!(
                "{} {} (field {})",
                escape(&o.kind),
                escape(&o.value),
                escape(&o.field)
            ),
        );
    }
    match &a.note {
        Some(note) => line(
            "reason",
            &format!(
                "the agent's words, not checked by sallyport: \"{}\"",
                escape(note)
            ),
        ),
        None => line("reason", "the agent gave none"),
    }
    line("request", &escape(&a.request));
    line(
        "definition",
        &format!(
            "{}: {}",
            escape(&a.definition_hash),
            escape(&a.definition_status)
        ),
    );
    line(
        "",
        "checked again before sending: a definition changed since this request voids the approval",
    );
    let requester = a.session.requester().map_or_else(
        || "no requester named".to_owned(),
        |r| format!("requested by {}", escape(r)),
    );
    line(
        "session",
        &format!("{}, {requester}", escape(a.session.id().as_str())),
    );
    line("created", &a.created_at());
    let expiry = match a.state {
        ApprovalState::Awaiting | ApprovalState::Expired => {
            format!("{} ({})", a.expires_at(), countdown(a, now_ms))
        }
        _ => format!("{} (decided before it)", a.expires_at()),
    };
    line("expires", &expiry);
    line("state", a.state.as_str());
    match &a.decision {
        Some(d) => {
            let verb = match d.verdict {
                Verdict::Approve => "approved",
                Verdict::Deny => "denied",
            };
            let mut text = format!(
                "{verb} by {} via {} at {}",
                escape(&d.decider.by),
                escape(&d.decider.channel),
                sallyport_core::clock::rfc3339(d.at_ms)
            );
            if let Some(reason) = &d.reason {
                let _ = write!(text, ": \"{}\"", escape(reason));
            }
            line("decision", &text);
        }
        None => line("decision", "none yet"),
    }
    if a.required_approvals > 1 {
        let who: Vec<String> = a
            .approvals
            .iter()
            .map(|d| approver_text(&d.decider))
            .collect();
        let listed = if who.is_empty() {
            String::new()
        } else {
            format!(": {}", who.join("; "))
        };
        line(
            "approvals",
            &format!(
                "{} of {} distinct approvers{listed}",
                a.approval_count(),
                a.required_approvals
            ),
        );
    } else if let Some(d) = &a.decision
        && (d.decider.name.is_some()
            || !d.decider.groups.is_empty()
            || d.decider.key_id.is_some()
            || d.decider.signature.is_some())
    {
        line("approver", &approver_text(&d.decider));
    }
    if let Some(claim) = &a.claim
        && matches!(a.state, ApprovalState::Approved | ApprovalState::Executing)
    {
        line(
            "claimed",
            &format!(
                "by {} until {}",
                escape(&claim.owner),
                sallyport_core::clock::rfc3339(claim.until_ms)
            ),
        );
    }
    if let Some(execution) = &a.execution {
        line("execution", &escape(execution.as_str()));
    }
    if let Some(r) = &a.result {
        let mut text = r.status.to_string();
        if let Some(code) = r.code_str() {
            let _ = write!(text, ", code {}", escape(code));
        }
        if let Some(reason) = &r.reason {
            let _ = write!(text, " — {}", escape(reason));
        }
        line("result", &text);
        line(
            "receipt",
            &r.receipt_id
                .as_ref()
                .map_or_else(|| "none".to_owned(), |id| escape(id.as_str()).into_owned()),
        );
    }
    out
}

/// Pretty JSON with every non-ASCII character written as a `\u` escape: a parser reads the
/// same values, and a terminal showing it cannot be turned around by a bidi character the
/// agent wrote (control characters are escaped by JSON itself). Structural JSON is ASCII, so
/// every non-ASCII character is inside a string, where the escape is valid.
pub(crate) fn ascii_json<T: serde::Serialize + ?Sized>(value: &T) -> Result<String, Failure> {
    let text = serde_json::to_string_pretty(value)
        .map_err(|e| Failure::new(Exit::Failure, e.to_string()))?;
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_ascii() {
            out.push(c);
        } else {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                let _ = write!(out, "\\u{unit:04x}");
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_are_hours_and_minutes_rounded_down() {
        assert_eq!(span(24 * 3_600_000 - 1), "23h 59m");
        assert_eq!(span(61 * 60_000), "1h 1m");
        assert_eq!(span(59_999), "under 1m");
        assert_eq!(span(48 * 3_600_000), "48h 0m");
    }

    #[test]
    fn ascii_json_escapes_every_non_ascii_character_and_parses_back_to_the_same_text() {
        let text = "Zoë \u{202e}fdp.exe 請求 \u{1F600} \u{1b}[2K\r\n";
        let json = ascii_json(&serde_json::json!({"note": text})).unwrap();
        assert!(json.is_ascii(), "{json}");
        assert!(json.contains("\\u202e"), "{json}");
        assert!(json.contains("\\ud83d\\ude00"), "{json}");
        assert!(!json.contains('\u{1b}') && !json.contains('\r'), "{json}");
        let back: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(back["note"], text);
    }
}
