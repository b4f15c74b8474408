// Snippets under search results on a site opened from disk. Sphinx's search fetches each result page to
// show the text around the search word; a browser refuses fetch() over file://. The page texts written
// with the site (search-texts.js, loaded before this file on the search page only) answer those
// requests; every other request goes to the browser as before.
(() => {
  const texts = window.WORKBENCH_SEARCH_TEXTS || {};
  const root = new URL(document.documentElement.dataset.content_root || "./", window.location.href).href;
  const browserFetch = window.fetch ? window.fetch.bind(window) : null;
  const escapeHTML = (s) => s.replaceAll("&", "&amp;").replaceAll("<", "&lt;").replaceAll(">", "&gt;");
  window.fetch = (resource, options) => {
    const url = new URL(typeof resource === "string" ? resource : resource.url, window.location.href);
    url.hash = "";
    url.search = "";
    const page = url.href.startsWith(root) ? decodeURIComponent(url.href.slice(root.length)) : null;
    if (page !== null && Object.prototype.hasOwnProperty.call(texts, page)) {
      const body = `<html><body><div role="main">${escapeHTML(texts[page])}</div></body></html>`;
      return Promise.resolve(new Response(body, { headers: { "Content-Type": "text/html" } }));
    }
    return browserFetch(resource, options);
  };
})();
