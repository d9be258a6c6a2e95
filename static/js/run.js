// Live run pages and the approvals inbox. No inline handlers, no eval: CSP-friendly.
(function () {
  "use strict";

  // --- the run socket: resume exactly after the last event shown ----------------------------

  function lastSeq() {
    var marker = document.getElementById("last-seq");
    return marker ? parseInt(marker.getAttribute("data-seq"), 10) || 0 : 0;
  }

  // The last event whose changes (header, totals, step rows) the page shows: a socket sends
  // them just after the event's own line, and a socket may close in between.
  function statedSeq() {
    var marker = document.getElementById("stated-seq");
    return marker ? parseInt(marker.getAttribute("data-seq"), 10) || 0 : lastSeq();
  }

  // The ws extension reconnects with the URL it first read; ask for what was missed since.
  htmx.createWebSocket = function (url) {
    if (url.indexOf("/ws/runs/") !== -1) {
      url = url.replace(/([?&]after=)\d*/, "$1" + Math.min(statedSeq(), lastSeq()));
    }
    var socket = new WebSocket(url, []);
    socket.binaryType = htmx.config.wsBinaryType;
    return socket;
  };

  // A push of changed step rows (a message of its own: rows cannot share a fragment): drop
  // those on another page of the steps table, so their swaps find no missing target.
  htmx.defineExtension("step-rows", {
    transformResponse: function (text) {
      if (!/^\s*<tr[\s>]/.test(text)) return text;
      var template = document.createElement("template");
      template.innerHTML = text;
      Array.prototype.slice.call(template.content.children).forEach(function (row) {
        if (!row.id || !document.getElementById(row.id)) row.remove();
      });
      return template.innerHTML;
    },
  });

  var resumeAsked = false;

  document.addEventListener("htmx:wsBeforeMessage", function (event) {
    if (!event.target || event.target.id !== "run-live") return;
    var template = document.createElement("template");
    template.innerHTML = event.detail.message;
    var marker = template.content.getElementById("last-seq");
    if (!marker) return; // answer tokens: no seq, appended as they come
    var first = parseInt(marker.getAttribute("data-first"), 10);
    var last = parseInt(marker.getAttribute("data-seq"), 10);
    var shown = lastSeq();
    if (last <= shown) {
      event.preventDefault(); // already on the page
      return;
    }
    if (first > shown + 1) {
      // A gap: drop this batch and ask for everything after what is shown, in order.
      event.preventDefault();
      if (!resumeAsked) {
        resumeAsked = true;
        event.detail.socketWrapper.send(JSON.stringify({ resume_after: shown }));
      }
      return;
    }
    resumeAsked = false;
  });

  document.addEventListener("htmx:wsAfterMessage", function (event) {
    if (!event.target) return;
    if (event.target.id === "run-live") {
      dedupeTimeline();
      refreshOpenStep(event.detail.message);
      markSelected();
    } else if (event.target.classList.contains("live-badge")) {
      inboxChanged();
    }
  });

  var liveSocket = null;

  document.addEventListener("htmx:wsOpen", function (event) {
    if (event.target && event.target.id === "run-live") {
      resumeAsked = false;
      liveSocket = event.detail.socketWrapper;
      event.target.setAttribute("data-state", "live");
    }
  });

  // Pushes are best-effort and a lost last batch has no later batch to reveal the gap: now and
  // then ask for anything after what is shown (usually there is nothing, and nothing comes).
  var CATCH_UP_MS = 10000;
  setInterval(function () {
    var live = document.getElementById("run-live");
    var header = document.getElementById("run-header");
    if (!liveSocket || !live || live.getAttribute("data-state") !== "live") return;
    if (header && header.classList.contains("is-terminal")) return;
    liveSocket.send(JSON.stringify({ resume_after: lastSeq() }));
  }, CATCH_UP_MS);

  // A catch-up can cross a batch already in flight: keep one line per event.
  function dedupeTimeline() {
    var seen = {};
    document.querySelectorAll("#timeline > li[data-seq]").forEach(function (item) {
      var seq = item.getAttribute("data-seq");
      if (seen[seq]) item.remove();
      seen[seq] = true;
    });
  }

  // 4401: the session no longer signs the user in (a logout, a password changed elsewhere); the
  // socket will not reconnect, and only a reload (and a new sign-in) brings the page back.
  var NOT_SIGNED_IN = 4401;
  document.addEventListener("htmx:wsClose", function (event) {
    if (event.target && event.target.id === "run-live") {
      liveSocket = null;
      var closing = event.detail && event.detail.event;
      var signedOut = closing && closing.code === NOT_SIGNED_IN;
      event.target.setAttribute("data-state", signedOut ? "signed-out" : "offline");
    }
  });

  // --- step details: click a graph node or a step row ---------------------------------------

  function stepUrl(stepId) {
    var graph = document.getElementById("run-page");
    return graph ? graph.getAttribute("data-step-url").replace(/0\/$/, stepId + "/") : null;
  }

  function showStep(stepId) {
    var url = stepUrl(stepId);
    if (!url) return;
    htmx.ajax("GET", url, { target: "#step-panel", swap: "innerHTML" }).then(markSelected);
  }

  function openStepId() {
    var panel = document.querySelector("#step-panel [data-step]");
    return panel ? panel.getAttribute("data-step") : null;
  }

  function markSelected() {
    var open = openStepId();
    document.querySelectorAll(".is-selected").forEach(function (el) {
      el.classList.remove("is-selected");
    });
    if (!open) return;
    var node = document.getElementById("step-" + open);
    var row = document.getElementById("step-row-" + open);
    if (node) node.classList.add("is-selected");
    if (row) row.classList.add("is-selected");
  }

  function refreshOpenStep(message) {
    var open = openStepId();
    if (open && message.indexOf('id="step-row-' + open + '"') !== -1) showStep(open);
  }

  function stepIdOf(target) {
    if (!target.closest) return null;
    if (target.closest("a, button, summary, pre, input, textarea")) return null;
    var node = target.closest('#graph g.node[id^="step-"]');
    if (node) return node.id.slice("step-".length);
    var row = target.closest("tr[data-step]");
    return row ? row.getAttribute("data-step") : null;
  }

  document.addEventListener("click", function (event) {
    var stepId = stepIdOf(event.target);
    if (stepId) showStep(stepId);
  });

  document.addEventListener("keydown", function (event) {
    if (event.key !== "Enter" && event.key !== " ") return;
    var node = event.target.closest && event.target.closest('#graph g.node[id^="step-"]');
    if (!node) return;
    event.preventDefault();
    showStep(node.id.slice("step-".length));
  });

  // Graph nodes are focusable buttons for keyboard users (re-applied after each re-render).
  function prepareGraph(root) {
    (root.querySelectorAll ? root : document).querySelectorAll('g.node[id^="step-"]').forEach(
      function (node) {
        node.setAttribute("tabindex", "0");
        node.setAttribute("role", "button");
      }
    );
  }

  document.addEventListener("htmx:load", function (event) {
    prepareGraph(event.target);
  });
  document.addEventListener("htmx:oobAfterSwap", function (event) {
    if (event.target && event.target.id === "graph") {
      prepareGraph(event.target);
      markSelected();
    }
  });

  // --- the approvals inbox: follow the count while nothing is being edited ---------------------

  // A decision's answer can arrive after the pushes it caused (the run went on and asked again
  // before the response was swapped in): look at the count again once the page has changed.
  document.addEventListener("htmx:afterSettle", function () {
    if (document.getElementById("inbox-list")) inboxChanged();
  });

  // Show the new requests, keeping the groups just decided (their stamps say what happened).
  function refreshInbox(list) {
    var decided = Array.prototype.filter.call(
      list.querySelectorAll("form.decision-group"),
      function (group) { return !group.querySelector(".approval-card.is-pending"); }
    );
    htmx.ajax("GET", list.getAttribute("data-refresh-url"), { target: "#inbox-list", swap: "outerHTML" })
      .then(function () {
        var fresh = document.getElementById("inbox-list");
        if (!fresh) return;
        decided.reverse().forEach(function (group) {
          var same = document.getElementById(group.id);
          if (!same) {
            fresh.insertBefore(group, fresh.firstChild);
            return;
          }
          // The run asked again in the same round (an approved call that came back stale):
          // keep what was decided above the new request, not only the request.
          var first = same.querySelector(".approval-card");
          group.querySelectorAll(".approval-card").forEach(function (card) {
            if (!document.getElementById(card.id)) same.insertBefore(card, first);
          });
        });
      });
  }

  // How many pending cards a list came with, so decisions made on it can be told apart.
  function noteShown(list) {
    if (list && !list.hasAttribute("data-shown")) {
      list.setAttribute("data-shown", String(list.querySelectorAll(".approval-card.is-pending").length));
    }
  }
  document.addEventListener("htmx:load", function () {
    noteShown(document.getElementById("inbox-list"));
  });

  function inboxChanged() {
    var list = document.getElementById("inbox-list");
    var badge = document.getElementById("pending-count");
    if (!list || !badge) return;
    var count = parseInt(badge.getAttribute("data-count"), 10) || 0;
    var shown = list.querySelectorAll(".approval-card.is-pending").length;
    // The list shows a page of what waits: compare the badge with the count it was rendered
    // against (less what was decided on it since), not with the cards on the page.
    noteShown(list);
    var decidedHere = (parseInt(list.getAttribute("data-shown"), 10) || 0) - shown;
    var rendered = parseInt(list.getAttribute("data-waiting"), 10);
    var expected = isNaN(rendered) ? shown : rendered - decidedHere;
    var stale = document.getElementById("inbox-stale");
    // Fewer waiting than expected is usually our own decision, its answer still on the way.
    if (count <= expected) {
      if (stale) stale.hidden = true;
    } else if (shown === 0) {
      // Nothing on the page can be lost: show the new requests.
      refreshInbox(list);
    } else if (stale) {
      stale.hidden = false; // never replace cards a reviewer may be editing
    }
  }
})();

// The decision bar names what approving does for the ticked steps only.
(function () {
  "use strict";
  function refreshSummary(form) {
    var shown = 0;
    form.querySelectorAll('input[name="approval"]').forEach(function (box) {
      var effect = form.querySelector('.effect[data-approval="' + box.value + '"]');
      if (!effect) return;
      effect.hidden = !box.checked;
      if (box.checked) shown += 1;
    });
    var none = form.querySelector(".effects-none");
    if (none) none.hidden = shown > 0;
  }
  document.addEventListener("change", function (event) {
    var box = event.target;
    if (box && box.name === "approval" && box.form) refreshSummary(box.form);
  });
})();
