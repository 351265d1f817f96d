//! Remembered approvals: the "approve and remember" choice on an approval's card, and the
//! page listing remembered approvals with a revoke button each.

use maud::{Markup, html};
use sallyport_core::action::EffectClass;
use sallyport_core::approval::{Approval, ApprovalState, RememberedApproval};

use crate::render::Text;

/// The window choices the form offers, as (form value, label).
const WINDOWS: [(&str, &str); 3] = [
    ("window-1h", "any arguments, any session, for 1 hour"),
    ("window-8h", "any arguments, any session, for 8 hours"),
    ("window-7d", "any arguments, any session, for 7 days"),
];

/// Whether "approve and remember" is offered for `a`: an awaiting call of an action that is
/// not `irreversible_or_broad` and needs one approver.
pub(crate) fn offered(a: &Approval) -> bool {
    a.state == ApprovalState::Awaiting
        && a.effect != EffectClass::IrreversibleOrBroad
        && a.required_approvals <= 1
}

/// The "approve and remember" form on an approval's card (nothing when not offered).
pub(crate) fn remember_form(csrf: &str, a: &Approval) -> Markup {
    let id = a.approval_id.as_str();
    html! {
        @if offered(a) {
            form.remember method="post" action=(format!("/approvals/{id}/remember")) {
                input type="hidden" name="csrf" value=(csrf);
                fieldset {
                    legend { "Approve and remember" }
                    p.hint {
                        "Approves this call, and lets later calls of this action within the scope you pick go out without asking "
                        "while its definition is unchanged, until revoked (at most 30 days). Listed under Remembered."
                    }
                    label {
                        input type="radio" name="scope" value="exact" checked;
                        " exactly this request again (any session)"
                    }
                    label {
                        input type="radio" name="scope" value="session";
                        " any arguments in this session"
                    }
                    @for (value, label) in WINDOWS {
                        label {
                            input type="radio" name="scope" value=(value);
                            " " (label)
                        }
                    }
                    div.buttons {
                        button.approve type="submit" { "Approve and remember" }
                    }
                }
            }
        }
    }
}

/// The remembered approvals page: newest first, each with its standing and, while live, a
/// revoke button.
pub(crate) fn list(
    t: &Text,
    csrf: &str,
    remembered: &[RememberedApproval],
    now_ms: u64,
    flash: Option<&str>,
) -> Markup {
    html! {
        h1 { "Remembered approvals" }
        @if let Some(flash) = flash {
            p.flash role="status" { (flash) }
        }
        p.hint {
            "Each lets later calls of one action go out without asking, within its scope, while the action's definition is unchanged. "
            "Revoking one makes the next such call ask again."
        }
        @if remembered.is_empty() {
            p.empty { "Nothing is remembered." }
        } @else {
            table {
                thead { tr { th { "Id" } th { "Standing" } th { "Action" } th { "Scope" } th { "Remembered by" } th { "Until" } th {} } }
                tbody {
                    @for r in remembered {
                        @let id = r.remembered_id.as_str();
                        @let standing = r.standing(now_ms);
                        tr.(standing) {
                            td { code { (id) } }
                            td { (standing) }
                            td { (t.show(&r.action)) }
                            td { (t.show(&r.scope.describe())) }
                            td { (t.show(&r.created_by.by)) " via " (t.show(&r.created_by.channel)) }
                            td { (r.expires_at()) }
                            td {
                                @if let Some(v) = &r.revoked {
                                    "revoked by " (t.show(&v.by.by)) " at " (sallyport_core::clock::rfc3339(v.at_ms))
                                } @else if standing == "live" {
                                    form method="post" action=(format!("/remembered/{id}/revoke")) {
                                        input type="hidden" name="csrf" value=(csrf);
                                        button.deny type="submit" { "Revoke" }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}
