//! The HTML pages (maud: every interpolation is HTML-escaped).

use maud::{DOCTYPE, Markup, html};
use sallyport_core::action::EffectClass;
use sallyport_core::approval::{Approval, ApprovalState, Verdict};
use sallyport_core::journal::{AuditRecord, SignedHead, VerifyReport};
// The textarea holds no more than a decision keeps (`ApprovalDecision::new` cuts at this).
use sallyport_vocab::MAX_REASON;

use crate::auth::SessionInfo;

pub(crate) mod connect;
pub(crate) mod remembered;
use crate::render::{Text, countdown, effect_words, externality_words, wire};

/// What the page frame needs to know.
pub(crate) struct Frame<'a> {
    pub(crate) session: Option<&'a SessionInfo>,
    pub(crate) carries_out: bool,
    /// Whether "Connect an account" is offered (and linked).
    pub(crate) connect: bool,
    pub(crate) current: &'a str,
}

/// The page frame: head, navigation, the logout form.
pub(crate) fn page(frame: &Frame<'_>, title: &str, body: &Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · sallyport console" }
                link rel="stylesheet" href="/style.css";
            }
            body {
                header {
                    span.brand { "sallyport" }
                    @if let Some(session) = frame.session {
                        nav aria-label="Sections" {
                            @for (href, label) in [("/approvals", "Approvals"), ("/remembered", "Remembered"), ("/calls", "Calls"), ("/chain", "Audit chain"), ("/connect", "Connect an account")] {
                                @if href == "/connect" && !frame.connect {
                                } @else if frame.current == href {
                                    a href=(href) aria-current="page" { (label) }
                                } @else {
                                    a href=(href) { (label) }
                                }
                            }
                        }
                        form.logout method="post" action="/logout" {
                            input type="hidden" name="csrf" value=(session.csrf);
                            span.user { "Signed in as " strong { (session.shown_name()) } }
                            button type="submit" { "Log out" }
                        }
                    }
                }
                @if frame.session.is_some() && !frame.carries_out {
                    p.notice role="note" {
                        "This console records decisions only: it has no executor, so it cannot carry calls out. "
                        "An executor that holds the action sends an approved call (its approval worker, or the agent's check_approval)."
                    }
                }
                main { (body) }
            }
        }
    }
}

/// The login page.
///
/// `provider` names the OpenID Connect provider when the console signs in through one;
/// `token` says whether a shared login token is configured.
pub(crate) fn login(csrf: &str, failed: bool, provider: Option<&str>, token: bool) -> Markup {
    html! {
        h1 { "Log in" }
        @if failed {
            p.error role="alert" { "That token is not a console login token." }
        }
        @if let Some(provider) = provider {
            div.card.signin {
                a.button href="/login/oidc" { "Sign in with " (provider) }
                p.hint { "Your organization's sign-in: decisions are recorded with your name and groups." }
            }
        }
        @if token {
            @if provider.is_some() {
                h2 { "Shared login token" }
            }
            form.card method="post" action="/login" {
                input type="hidden" name="csrf" value=(csrf);
                label for="token" { "Login token" }
                @if provider.is_some() {
                    input #token type="password" name="token" autocomplete="current-password" required;
                } @else {
                    input #token type="password" name="token" autocomplete="current-password" required autofocus;
                }
                button type="submit" { "Log in" }
            }
            p.hint { "This is the single shared login, meant for a console one person uses: everyone who has the token decides under the same name. A team signs in with its organization's OpenID Connect provider." }
            p.hint { "The token was printed once when the console started, or is in the file it was given." }
        }
    }
}

/// The page after an OpenID Connect sign-in (the browser goes on to the approvals).
pub(crate) fn signed_in(name: &str, provider: &str) -> Markup {
    html! {
        h1 { "Signed in" }
        p { "Signed in as " strong { (name) } " through " (provider) "." }
        p { a href="/approvals" { "Continue to the approvals" } }
    }
}

/// A short message page.
pub(crate) fn message(heading: &str, text: &str) -> Markup {
    html! {
        h1 { (heading) }
        p { (text) }
        p { a href="/approvals" { "Back to the approvals" } }
    }
}

/// The approvals page: pending ones first, then the recently decided.
pub(crate) fn approvals(
    t: &Text,
    csrf: &str,
    pending: &[Approval],
    decided: &[Approval],
    now_ms: u64,
) -> Markup {
    html! {
        h1 { "Pending approvals" }
        @if pending.is_empty() {
            p.empty { "Nothing is waiting for a decision." }
        }
        @for a in pending {
            (card(t, csrf, a, now_ms, Shown::InList))
        }
        h2 { "Recently decided" }
        @if decided.is_empty() {
            p.empty { "No decisions yet." }
        }
        @for a in decided {
            (card(t, csrf, a, now_ms, Shown::InList))
        }
    }
}

/// One approval's page.
pub(crate) fn approval(
    t: &Text,
    csrf: &str,
    a: &Approval,
    now_ms: u64,
    flash: Option<&str>,
) -> Markup {
    html! {
        p { a href="/approvals" { "← All approvals" } }
        @if let Some(flash) = flash {
            p.flash role="status" { (flash) }
        }
        (card(t, csrf, a, now_ms, Shown::OwnPage))
    }
}

/// Where a card is shown.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Shown {
    /// In the approvals list: the action links to the approval's page.
    InList,
    /// On the approval's own page.
    OwnPage,
    /// Above the confirmation step: the page's one form is the confirmation, so the card
    /// carries no buttons and no reason box of its own.
    Confirming,
}

/// The label of the request on a card: what it is, or would have been, sent as.
fn request_label(state: ApprovalState, expired_now: bool) -> &'static str {
    match state {
        ApprovalState::Awaiting if expired_now => "Request (never sent: it expired)",
        ApprovalState::Awaiting => "Request, exactly as it will be sent",
        ApprovalState::Denied => "Request (never sent: denied)",
        ApprovalState::Expired => "Request (never sent: it expired)",
        ApprovalState::Approved | ApprovalState::Executing | ApprovalState::Finished => {
            "Request, as approved"
        }
    }
}

fn card(t: &Text, csrf: &str, a: &Approval, now_ms: u64, shown: Shown) -> Markup {
    let id = a.approval_id.as_str();
    let link = shown == Shown::InList;
    let expired_now = a.state == ApprovalState::Awaiting && a.is_expired_at(now_ms);
    html! {
        article.approval.(a.state.as_str()) id=(id) aria-labelledby=(format!("h-{id}")) {
            h3 id=(format!("h-{id}")) {
                @if link {
                    a href=(format!("/approvals/{id}")) { (t.show(&a.action)) }
                } @else {
                    (t.show(&a.action))
                }
                " "
                span.state { (if expired_now { "expired" } else { a.state.as_str() }) }
            }
            p.summary { (t.show(&a.summary)) }
            dl {
                dt { "Effect" }
                dd.effect.(a.effect.as_str()) { (effect_words(a.effect)) " " code { (a.effect.as_str()) } }
                dt { "Visibility" }
                dd { (externality_words(a.externality)) }
                dt { "Data" }
                dd {
                    @if a.data_classes.is_empty() { "no data class declared" }
                    @for (i, class) in a.data_classes.iter().enumerate() {
                        @if i > 0 { ", " }
                        code.data { (t.show(class.as_str())) }
                    }
                }
                dt { "Objects" }
                dd {
                    @if a.objects.is_empty() { "none named" }
                    ul.objects {
                        @for o in &a.objects {
                            li { span.kind { (t.show(&o.kind)) } " " code.object { (t.show(&o.value)) } " (" (t.show(&o.field)) ")" }
                        }
                    }
                }
                dt { (request_label(a.state, expired_now)) }
                dd { pre.request { (t.show(&a.request)) } }
                dt { "Definition" }
                dd { (t.show(&a.definition_status)) " " code.hash title=(a.definition_hash) { (short(&a.definition_hash)) } }
                dt { "Session" }
                dd {
                    code { (t.show(a.session.id().as_str())) }
                    @if let Some(by) = a.session.requester() { " requested by " (t.show(by)) }
                }
                dt { "Asked" }
                dd { time datetime=(a.created_at()) { (a.created_at()) } }
                @if a.state == ApprovalState::Awaiting {
                    dt { "Expires" }
                    dd { time datetime=(a.expires_at()) { (a.expires_at()) } " (" (countdown(a.expires_at_ms, now_ms)) ")" }
                }
                dt { "Approval" }
                dd { code { (id) } }
            }
            section.agent aria-label="The agent's reason" {
                h4 { "The agent's reason — its own words, not checked by anyone" }
                @if let Some(note) = &a.note {
                    blockquote { (t.show(note)) }
                } @else {
                    p.empty { "The agent gave no reason." }
                }
            }
            @if a.state == ApprovalState::Awaiting && !expired_now && shown != Shown::Confirming {
                (decide_form(csrf, a, None))
                (remembered::remember_form(csrf, a))
            }
            @if let Some(d) = &a.decision {
                section.decision aria-label="Decision" {
                    h4 { "Decision" }
                    p {
                        strong { (match d.verdict { Verdict::Approve => "Approved", Verdict::Deny => "Denied" }) }
                        " by " strong.by { (t.show(&d.decider.by)) }
                        @if let Some(name) = &d.decider.name { " (" span.name { (t.show(name)) } ")" }
                        " through " (t.show(&d.decider.channel))
                        ", " time datetime=(sallyport_core::clock::rfc3339(d.at_ms)) { (sallyport_core::clock::rfc3339(d.at_ms)) }
                    }
                    @if let Some(reason) = &d.reason { p { "Reason: " (t.show(reason)) } }
                }
            }
            @if let Some(r) = &a.result {
                section.result aria-label="Result" {
                    h4 { "Result" }
                    p {
                        span.status.(r.status.as_str()) { (r.status.as_str()) }
                        @if let Some(code) = &r.code { " " code { (t.show(code.as_str())) } }
                    }
                    @if let Some(reason) = &r.reason { p { (t.show(reason)) } }
                    @if let Some(receipt) = &r.receipt_id {
                        p { "Receipt " a href=(format!("/calls/{}", receipt.as_str())) { code { (receipt.as_str()) } } }
                    }
                }
            } @else if matches!(a.state, ApprovalState::Approved | ApprovalState::Executing) {
                p.hint { "Approved; waiting for an executor that holds the action to carry it out." }
            }
        }
    }
}

/// The approve/deny form (`confirm` set: the confirmation step of an irreversible action).
fn decide_form(csrf: &str, a: &Approval, confirm: Option<&str>) -> Markup {
    let id = a.approval_id.as_str();
    let irreversible = a.effect == EffectClass::IrreversibleOrBroad;
    html! {
        form.decide method="post" action=(format!("/approvals/{id}/decide")) {
            input type="hidden" name="csrf" value=(csrf);
            @if let Some(reason) = confirm {
                input type="hidden" name="confirm" value="yes";
                input type="hidden" name="reason" value=(reason);
                button.approve type="submit" name="verdict" value="approve" { "Yes, approve and send it" }
                a href=(format!("/approvals/{id}")) { "Cancel" }
            } @else {
                label for=(format!("reason-{id}")) { "Your reason (optional; the agent is told it when you deny)" }
                textarea id=(format!("reason-{id}")) name="reason" rows="2" maxlength=(MAX_REASON) {}
                @if irreversible {
                    p.hint { "This action cannot be undone: approving asks you to confirm." }
                }
                div.buttons {
                    button.approve type="submit" name="verdict" value="approve" { "Approve" }
                    button.deny type="submit" name="verdict" value="deny" { "Deny" }
                }
            }
        }
    }
}

/// The confirmation step of approving an irreversible or broad action.
pub(crate) fn confirm(t: &Text, csrf: &str, a: &Approval, reason: &str, now_ms: u64) -> Markup {
    html! {
        h1 { "Confirm: this cannot be undone" }
        p.error role="alert" { (effect_words(a.effect)) " Check the request and the objects once more." }
        (card(t, csrf, a, now_ms, Shown::Confirming))
        @if reason.is_empty() {
            p.hint { "You gave no reason." }
        } @else {
            p.hint { "Your reason: " (t.show(reason)) }
        }
        (decide_form(csrf, a, Some(reason)))
    }
}

/// The calls page.
pub(crate) fn calls(
    t: &Text,
    records: &[&AuditRecord],
    actions: &[String],
    status: &str,
    action: &str,
) -> Markup {
    html! {
        h1 { "Recent calls" }
        form.filter method="get" action="/calls" {
            label for="status" { "Status" }
            select #status name="status" {
                option value="" selected[status.is_empty()] { "any" }
                @for s in ["completed", "pending", "already_in_desired_state", "rejected", "unknown"] {
                    option value=(s) selected[status == s] { (s) }
                }
            }
            label for="action" { "Action" }
            select #action name="action" {
                option value="" selected[action.is_empty()] { "any" }
                @for a in actions {
                    option value=(a) selected[action == a] { (t.show(a)) }
                }
            }
            button type="submit" { "Filter" }
        }
        @if records.is_empty() {
            p.empty { "No calls match." }
        } @else {
            div.scroll {
                table {
                    thead { tr { th { "When" } th { "Action" } th { "Phase" } th { "Status" } th { "Code" } th { "Objects" } th { "Dispatches" } th { "Receipt" } } }
                    tbody {
                        @for r in records {
                            @let e = &r.event;
                            tr {
                                td { time datetime=(e.at) { (e.at) } }
                                td { (t.show(&e.action)) }
                                td { (wire(&e.phase)) }
                                td { span.status.(e.status.as_str()) { (e.status.as_str()) } }
                                td { @if let Some(c) = &e.code { code { (t.show(c.as_str())) } } }
                                td { @for o in &e.objects { code.object { (t.show(&o.value)) } " " } }
                                td { (e.dispatches) }
                                td { a href=(format!("/calls/{}", e.receipt_id.as_str())) { code { (short(e.receipt_id.as_str())) } } }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// One call's audit record, and the other records of its attempt.
pub(crate) fn call(t: &Text, record: &AuditRecord, related: &[&AuditRecord]) -> Markup {
    let e = &record.event;
    let json = serde_json::to_string_pretty(record).unwrap_or_default();
    html! {
        p { a href="/calls" { "← All calls" } }
        h1 { (t.show(&e.action)) " " span.status.(e.status.as_str()) { (e.status.as_str()) } }
        dl {
            dt { "Receipt" } dd { code { (e.receipt_id.as_str()) } }
            dt { "Attempt" } dd { code { (e.attempt_id.as_str()) } }
            dt { "When" } dd { (e.at) }
            @if let Some(s) = &e.subject { dt { "On behalf of" } dd { (t.show(s)) } }
            dt { "Phase" } dd { (wire(&e.phase)) }
            @if let Some(c) = &e.code { dt { "Code" } dd { code { (t.show(c.as_str())) } } }
            @if let Some(r) = &e.reason { dt { "Reason" } dd { (t.show(r)) } }
            @if let Some(r) = &e.request { dt { "Request" } dd { pre.request { (t.show(r)) } } }
            dt { "Dispatches" } dd { (e.dispatches) }
            @if let Some(s) = e.upstream_status { dt { "Upstream status" } dd { (s) } }
            @if let Some(n) = &e.approval {
                dt { "Approval" }
                dd {
                    a href=(format!("/approvals/{}", n.approval_id.as_str())) { code { (n.approval_id.as_str()) } }
                    " " (wire(&n.step))
                    @if let Some(by) = &n.by { " by " (t.show(by)) }
                    @if let Some(ch) = &n.channel { " through " (t.show(ch)) }
                }
            }
            dt { "Chain position" } dd { (record.seq) " · " code.hash title=(record.hash) { (short(&record.hash)) } }
        }
        @if !e.findings.is_empty() {
            h2 { "What the answer carried" }
            p.note { "Found in the upstream's answer before the agent read it. The values are never recorded." }
            div.scroll {
                table.findings {
                    thead { tr { th { "Kind" } th { "Rule" } th { "Where" } th { "Done" } } }
                    tbody {
                        @for f in &e.findings {
                            tr {
                                td { (finding_kind(f.kind)) }
                                td { code { (t.show(&f.rule)) } }
                                td { code { (t.show(&f.pointer)) } }
                                td { span.finding.(f.action.as_str()) { (f.action.as_str()) } }
                            }
                        }
                    }
                }
            }
        }
        @if related.len() > 1 {
            h2 { "Every record of this attempt" }
            ol {
                @for r in related {
                    li { a href=(format!("/calls/{}", r.event.receipt_id.as_str())) { (r.seq) " " (wire(&r.event.phase)) " " (r.event.status.as_str()) } }
                }
            }
        }
        h2 { "Audit record" }
        p.hint { "As stored in the chain, with every control, bidi and invisible character shown as a \\u{…} escape; the export holds the exact bytes." }
        pre.json { (t.json(&json)) }
    }
}

/// The chain page.
pub(crate) fn chain(
    report: &VerifyReport,
    newest: Option<&SignedHead>,
    key: Option<&str>,
) -> Markup {
    html! {
        h1 { "Audit chain" }
        @if report.is_intact() {
            p.ok role="status" { "Intact: every record links to the one before it." }
        } @else if let Some(b) = &report.first_break {
            p.error role="alert" { "Broken at record " (b.seq) " (" (wire(&b.kind)) "): " (b.detail) }
        }
        dl {
            dt { "Records" } dd { (report.records) }
            dt { "Head" } dd { code.hash.full { (report.head.hash) } " at " (report.head.count) }
            dt { "Signed head" }
            dd {
                @match (key, report.last_signed, newest) {
                    (Some(key), Some(signed), _) => {
                        "signatures checked with key " code { (key) } ": signed through record " (signed)
                    }
                    (Some(key), None, _) => {
                        strong.error { "no head signed by key " code { (key) } " verifies" }
                    }
                    (None, _, Some(head)) => {
                        "newest signed head: record " (head.count) " by key " code { (head.key_id) } ", " (head.signed_at)
                        " (not checked: the console has no public key)"
                    }
                    (None, _, None) => { "none: this journal's heads are not signed" }
                }
            }
        }
        p { a.button href="/chain/export" download="sallyport-audit.jsonl" { "Export as JSON lines" } }
    }
}

fn short(hash: &str) -> &str {
    hash.get(..16).unwrap_or(hash)
}

/// A finding's kind in words.
fn finding_kind(kind: sallyport_core::inspect::FindingKind) -> &'static str {
    use sallyport_core::inspect::FindingKind;
    match kind {
        FindingKind::UnknownCredential => "credential-shaped value",
        FindingKind::Instruction => "instruction-shaped text",
        FindingKind::PersonalData => "personal data",
    }
}
