// pikku-mongo dashboard: small enhancements. Every page works without this file.
(function () {
  "use strict";

  // An action button opens the confirm page when there is no JavaScript. With it, the
  // browser asks in place and then posts the action with this page's CSRF token.
  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (!(form instanceof HTMLFormElement) || !form.dataset.confirm) {
      return;
    }
    event.preventDefault();
    if (!window.confirm(form.dataset.confirm)) {
      return;
    }
    var meta = document.querySelector('meta[name="csrf-token"]');
    var post = document.createElement("form");
    post.method = "post";
    post.action = form.dataset.post;
    // The form's hidden fields (a run's id or a schedule's name, and the action), and
    // what was typed in it (an event's payload).
    var fields = [];
    Array.prototype.forEach.call(form.querySelectorAll('input[type="hidden"], textarea'), function (el) {
      fields.push([el.name, el.value]);
    });
    fields.push(["csrf_token", meta ? meta.content : ""]);
    fields.forEach(function (pair) {
      var input = document.createElement("input");
      input.type = "hidden";
      input.name = pair[0];
      input.value = pair[1];
      post.appendChild(input);
    });
    document.body.appendChild(post);
    post.submit();
  });

  // The live-refresh switch: while it is off, the live sections do not poll.
  document.addEventListener("htmx:beforeRequest", function (event) {
    var toggle = document.getElementById("live-toggle");
    var elt = event.detail && event.detail.elt;
    if (toggle && !toggle.checked && elt && elt.hasAttribute("data-live")) {
      event.preventDefault();
    }
  });
})();
